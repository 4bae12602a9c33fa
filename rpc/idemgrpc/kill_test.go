package idemgrpc_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/rpc/idemgrpc"
	"github.com/idem-dev/idem/rpc/internal/rpctest"
	"github.com/idem-dev/idem/store/file"
)

const killChildEnv = "IDEMGRPC_KILL_CHILD"

// killChild is the server the kill test kills: the ledger behind the
// interceptor on the file store in dir, its effects appended (and synced)
// to dir/effects, one line per execution, so that they outlive the
// process. It stops where the parent wants to kill it and says so on its
// stdout: "before REF" inside the handler before the effect of a ref
// starting with "hold-", "recorded REF" once the outcome of a ref
// starting with "kill-" is recorded and before the answer is sent; only
// in the process whose generation (the third part of spec) ends the ref,
// so that the restarted one answers.
func killChild(spec string) {
	parts := strings.Split(spec, "|")
	dir, addr, gen := parts[0], parts[1], parts[2]
	stopsAt := func(ref, prefix string) bool {
		return strings.HasPrefix(ref, prefix) && strings.HasSuffix(ref, "-"+gen)
	}
	st, err := file.Open(filepath.Join(dir, "store"), file.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	eng := idem.New(st, idem.Policy{Lease: 2 * time.Second, CleanupInterval: -1})
	effects, err := os.OpenFile(filepath.Join(dir, "effects"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var mu sync.Mutex
	stdin := bufio.NewScanner(os.Stdin)
	stop := func(line string) {
		fmt.Println(line)
		stdin.Scan() // the parent kills the process here
	}
	seq := 0
	transfer := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
		ref := req.Fields["ref"].GetStringValue()
		if stopsAt(ref, "hold-") {
			stop("before " + ref)
		}
		mu.Lock()
		seq++
		exec := os.Getpid()*1000 + seq
		_, werr := fmt.Fprintf(effects, "%s %d\n", ref, exec)
		if werr == nil {
			werr = effects.Sync()
		}
		mu.Unlock()
		if werr != nil {
			return nil, werr
		}
		return structpb.NewStruct(map[string]any{"ref": ref, "execution": float64(exec)})
	}
	after := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		res, err := handler(ctx, req)
		if ref := req.(*structpb.Struct).Fields["ref"].GetStringValue(); stopsAt(ref, "kill-") {
			stop("recorded " + ref)
		}
		return res, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(after, idemgrpc.UnaryServerInterceptor(eng, idemgrpc.ServerOptions{})))
	srv.RegisterService(&rpctest.ServiceDesc, funcLedger(transfer))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_ = srv.Serve(ln)
}

type funcLedger func(context.Context, *structpb.Struct) (*structpb.Struct, error)

func (f funcLedger) Transfer(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	return f(ctx, req)
}

// effects reads the executions of ref from dir/effects.
func effects(t *testing.T, dir, ref string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "effects"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if r, exec, ok := strings.Cut(l, " "); ok && r == ref {
			out = append(out, exec)
		}
	}
	return out
}

// The server process is killed with SIGKILL while a call's client waits:
// once after the handler's outcome was recorded and before the answer
// left, once inside the handler before its effect. The client calls again
// with its key until a restarted server answers. Each call's effect
// happens once, and its client ends with that execution's outcome.
func TestServerKilled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	gen := 0
	start := func() *testkit.Child {
		gen++
		c := testkit.StartChild(t, fmt.Sprintf("%s=%s|%s|%d", killChildEnv, dir, addr, gen))
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
	cc := dial(t, addr, idemgrpc.ClientOptions{MaxAttempts: 500, Backoff: func(int) time.Duration { return 20 * time.Millisecond }})
	server := start()
	for _, ref := range []string{"kill-after-record-1", "hold-before-effect-2"} {
		t.Run(ref, func(t *testing.T) {
			type answer struct {
				res *structpb.Struct
				err error
			}
			got := make(chan answer, 1)
			go func() {
				ctx, cancel := context.WithTimeout(as(context.Background(), "alice"), 2*time.Minute)
				defer cancel()
				res, err := transfer(ctx, cc, rpctest.Transfer(ref, 1))
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
			runs := effects(t, dir, ref)
			if len(runs) != 1 || fmt.Sprint(rpctest.Execution(a.res)) != runs[0] {
				t.Fatalf("executions %v; the client got %s", runs, rpctest.Describe(a.res, nil))
			}
		})
	}
	kill(server)
}
