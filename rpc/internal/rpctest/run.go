package rpctest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem/internal/testkit"
)

// Call sends req through one framework's client (with its interceptor)
// and returns the answer.
type Call func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error)

// SendTransfers sends n transfers ("t0" to "tN-1"), four at a time, with
// call, and returns what each got.
func SendTransfers(n int, call Call) ([]*structpb.Struct, []error) {
	res, errs := make([]*structpb.Struct, n), make([]error, n)
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res[i], errs[i] = call(ctx, Transfer(fmt.Sprint("t", i), float64(i)))
		}()
	}
	wg.Wait()
	return res, errs
}

// CheckRanOnce checks what SendTransfers got through p: every transfer
// ran once, each caller got its own transfer's first execution, and p
// lost answers (else the test tested nothing).
func CheckRanOnce(t *testing.T, l *Ledger, p *Proxy, res []*structpb.Struct, errs []error) {
	t.Helper()
	for i := range res {
		ref := fmt.Sprint("t", i)
		if errs[i] != nil {
			t.Fatalf("%s: %v", ref, errs[i])
		}
		if got, first := Execution(res[i]), l.First(ref); got != first || res[i].Fields["ref"].GetStringValue() != ref {
			t.Errorf("%s: got %s, its first execution was %d", ref, Describe(res[i], nil), first)
		}
	}
	if d := l.Duplicates(); d != 0 || l.Total() != len(res) {
		t.Errorf("%d executions for %d transfers (%d duplicates)", l.Total(), len(res), d)
	}
	if p.Lost() == 0 {
		t.Fatal("the proxy lost no answer: the test tested nothing")
	}
	t.Logf("%d transfers, %d answers lost, %d executions", len(res), p.Lost(), l.Total())
}

// FreeAddr returns an address of 127.0.0.1 no one listens on.
func FreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// KillServer is the parent side of the kill test: it runs the server as a
// process of its own (the test binary again, with env set to a ChildSpec
// on the file store), and kills it with SIGKILL while a call's client
// waits, once after the outcome was recorded and before the answer left,
// once inside the handler before its effect; then it starts the server
// again. The client (dial makes it for the server's address) must send
// the call again with its key until the restarted server answers. Each
// call's effect must happen once, and its client end with that
// execution's outcome.
func KillServer(t *testing.T, env string, dial func(addr string) Call) {
	dir, addr := t.TempDir(), FreeAddr(t)
	gen := 0
	start := func() *testkit.Child {
		gen++
		c := testkit.StartChild(t, env+"="+ChildSpec(dir, addr, gen, "", ""))
		if !c.WaitLine("ready", 30*time.Second) {
			t.Fatal("the server did not start")
		}
		return c
	}
	kill := func(c *testkit.Child) {
		if err := c.Cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = c.Cmd.Wait()
	}
	call := dial(addr)
	server := start()
	defer func() { kill(server) }()
	for _, ref := range []string{"kill-after-record-1", "hold-before-effect-2"} {
		t.Run(ref, func(t *testing.T) {
			type answer struct {
				res *structpb.Struct
				err error
			}
			got := make(chan answer, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				res, err := call(ctx, Transfer(ref, 1))
				got <- answer{res, err}
			}()
			where := "recorded " + ref
			if strings.HasPrefix(ref, "hold-") {
				where = "before " + ref
			}
			if !server.WaitLine(where, 30*time.Second) {
				t.Fatalf("the server never reached %q", where)
			}
			kill(server)
			server = start()
			a := <-got
			if a.err != nil {
				t.Fatalf("the call ended with %v", a.err)
			}
			runs := Effects(t, dir, ref)
			if len(runs) != 1 || fmt.Sprint(Execution(a.res)) != runs[0] {
				t.Fatalf("executions %v; the client got %s", runs, Describe(a.res, nil))
			}
		})
	}
}
