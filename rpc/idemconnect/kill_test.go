package idemconnect_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

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
// waits (rpctest.KillServer): the call runs once, and its client ends with
// it.
func TestServerKilled(t *testing.T) {
	t.Parallel()
	rpctest.KillServer(t, killChildEnv, func(addr string) rpctest.Call {
		cl := client(t, addr, "connect-http1", idemconnect.ClientOptions{MaxAttempts: 500, Backoff: func(int) time.Duration { return 20 * time.Millisecond }})
		return func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
			res, err := call(ctx, cl, "alice", "", req)
			if err != nil {
				return nil, err
			}
			return res.Msg, nil
		}
	})
}
