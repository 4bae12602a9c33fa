package idemconnect_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/rpc/idemconnect"
	"github.com/idem-dev/idem/rpc/internal/rpctest"
)

const killChildEnv = "IDEMCONNECT_KILL_CHILD"

// killChild is the server the kill test runs as a process of its own
// (rpctest.Child), a Connect handler over HTTP/1.1 and HTTP/2.
func killChild(spec string) {
	c, err := rpctest.OpenChild(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	after := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			c.Recorded(req.Any().(*structpb.Struct))
			return res, err
		}
	})
	mux := http.NewServeMux()
	mux.Handle(rpctest.Procedure, connect.NewUnaryHandler(rpctest.Procedure,
		func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
			res, err := c.Transfer(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(res), nil
		},
		connect.WithInterceptors(after, idemconnect.NewServerInterceptor(c.Engine, idemconnect.ServerOptions{}))))
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: mux, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	fmt.Println("ready")
	_ = srv.Serve(ln)
}

// The Connect server process is killed with SIGKILL while a call's client
// waits, once after the outcome was recorded and before the answer left,
// once inside the handler before its effect; the client sends the call
// again with its key until a restarted server answers. Each call's effect
// happens once, and its client ends with that execution's outcome.
func TestServerKilled(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir, addr := t.TempDir(), ln.Addr().String()
	ln.Close()
	gen := 0
	start := func() *testkit.Child {
		gen++
		c := testkit.StartChild(t, killChildEnv+"="+rpctest.ChildSpec(dir, addr, gen, "", ""))
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
	cl := client(t, addr, "connect-http1", idemconnect.ClientOptions{MaxAttempts: 500, Backoff: func(int) time.Duration { return 20 * time.Millisecond }})
	server := start()
	for _, ref := range []string{"kill-after-record-1", "hold-before-effect-2"} {
		t.Run(ref, func(t *testing.T) {
			type answer struct {
				res *connect.Response[structpb.Struct]
				err error
			}
			got := make(chan answer, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				res, err := call(ctx, cl, "alice", "", rpctest.Transfer(ref, 1))
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
			runs := rpctest.Effects(t, dir, ref)
			if len(runs) != 1 || fmt.Sprint(rpctest.Execution(a.res.Msg)) != runs[0] {
				t.Fatalf("executions %v; the client got %s", runs, rpctest.Describe(a.res.Msg, nil))
			}
		})
	}
	kill(server)
}
