package idemconnect_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/rpc/idemconnect"
	"github.com/idem-dev/idem/rpc/idemgrpc"
	"github.com/idem-dev/idem/rpc/internal/rpctest"
	"github.com/idem-dev/idem/store/memory"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(killChildEnv); spec != "" {
		killChild(spec)
		return
	}
	testkit.VerifyTestMain(m)
}

func engine(t *testing.T, p idem.Policy) *idem.Engine {
	t.Helper()
	p.CleanupInterval = -1
	eng := idem.New(memory.New(), p)
	t.Cleanup(func() { eng.Close() })
	return eng
}

// serve starts the ledger as a Connect handler over TCP (HTTP/1.1 and
// unencrypted HTTP/2), with the interceptor when eng is set.
func serve(t *testing.T, eng *idem.Engine) (*rpctest.Ledger, string) {
	t.Helper()
	l := rpctest.NewLedger()
	var opts []connect.HandlerOption
	if eng != nil {
		opts = append(opts, connect.WithInterceptors(idemconnect.NewServerInterceptor(eng, idemconnect.ServerOptions{})))
	}
	mux := http.NewServeMux()
	mux.Handle(rpctest.Procedure, connect.NewUnaryHandler(rpctest.Procedure,
		func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
			res, err := l.Transfer(ctx, req.Msg)
			if err != nil {
				st := status.Convert(err) // the ledger speaks gRPC's statuses
				return nil, connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
			}
			return connect.NewResponse(res), nil
		}, opts...))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return l, ln.Addr().String()
}

// protocols are the ways a Connect client reaches the handler.
var protocols = map[string]struct {
	opts  []connect.ClientOption
	http2 bool
}{
	"connect-http1": {},
	"connect-h2c":   {http2: true},
	"grpc":          {opts: []connect.ClientOption{connect.WithGRPC()}, http2: true},
	"grpc-web":      {opts: []connect.ClientOption{connect.WithGRPCWeb()}, http2: true},
}

func client(t *testing.T, addr, protocol string, o idemconnect.ClientOptions) *connect.Client[structpb.Struct, structpb.Struct] {
	t.Helper()
	p := protocols[protocol]
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if p.http2 {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		// The proxy loses a connection's first answer: one call per
		// connection.
		tr.Protocols.SetHTTP1(true)
		tr.DisableKeepAlives = true
	}
	t.Cleanup(tr.CloseIdleConnections)
	opts := append([]connect.ClientOption{connect.WithInterceptors(idemconnect.NewClientInterceptor(o))}, p.opts...)
	return connect.NewClient[structpb.Struct, structpb.Struct](&http.Client{Transport: tr}, "http://"+addr+rpctest.Procedure, opts...)
}

func call(ctx context.Context, c *connect.Client[structpb.Struct, structpb.Struct], user, key string, msg *structpb.Struct) (*connect.Response[structpb.Struct], error) {
	req := connect.NewRequest(msg)
	if user != "" {
		req.Header().Set("Authorization", "Bearer "+user)
	}
	if key != "" {
		req.Header().Set("Idempotency-Key", key)
	}
	return c.CallUnary(ctx, req)
}

var fast = idemconnect.ClientOptions{MaxAttempts: 100, Backoff: func(int) time.Duration { return 5 * time.Millisecond }}

// lostAnswers sends n calls, four at a time, through a proxy that loses
// one answer in three, and returns what each got.
func lostAnswers(t *testing.T, eng *idem.Engine, protocol string, n int) (*rpctest.Ledger, *rpctest.Proxy, []*structpb.Struct, []error) {
	l, addr := serve(t, eng)
	p := rpctest.NewProxy(t, addr, 3)
	c := client(t, p.Addr, protocol, fast)
	res, errs := rpctest.SendTransfers(n, func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
		r, err := call(ctx, c, "alice", "", req)
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	})
	return l, p, res, errs
}

// In every protocol, answers lost after the handler ran: one execution
// per call, and each caller ends with its first execution's outcome.
func TestLostAnswersRunOnce(t *testing.T) {
	t.Parallel()
	for protocol := range protocols {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			l, p, res, errs := lostAnswers(t, engine(t, idem.Policy{}), protocol, 16)
			rpctest.CheckRanOnce(t, l, p, res, errs)
		})
	}
}

// The control, without the handler's interceptor: duplicates.
func TestLostAnswersWithoutInterceptorRunTwice(t *testing.T) {
	t.Parallel()
	for protocol := range protocols {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			l, p, _, _ := lostAnswers(t, nil, protocol, 16)
			if l.Duplicates() == 0 || p.Lost() == 0 {
				t.Fatalf("%d duplicates after %d lost answers: the control shows nothing", l.Duplicates(), p.Lost())
			}
			t.Logf("%s without the interceptor: %d executions for 16 calls", protocol, l.Total())
		})
	}
}

// Racers on one key, one per protocol and grpc-go's client besides: one
// execution, and every racer gets its outcome.
func TestRacersOnOneKeyAcrossProtocols(t *testing.T) {
	t.Parallel()
	l, addr := serve(t, engine(t, idem.Policy{}))
	req := rpctest.Transfer("race", 5)
	req.Fields["sleep_ms"] = structpb.NewNumberValue(300)
	var names []string
	var clients []*connect.Client[structpb.Struct, structpb.Struct]
	for protocol := range protocols {
		for range 3 {
			names, clients = append(names, protocol), append(clients, client(t, addr, protocol, idemconnect.ClientOptions{MaxAttempts: 30}))
		}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{MaxAttempts: 30})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	n := len(clients) + 3
	got, errs := make([]int, n), make([]error, n)
	testkit.FanOut(n, func(i int) {
		if i < len(clients) {
			r, err := call(context.Background(), clients[i], "alice", "race-key", req)
			if errs[i] = err; err == nil {
				got[i] = rpctest.Execution(r.Msg)
			}
			return
		}
		ctx := idemgrpc.WithKey(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice"), "race-key")
		res := new(structpb.Struct)
		if errs[i] = cc.Invoke(ctx, rpctest.Procedure, req, res); errs[i] == nil {
			got[i] = rpctest.Execution(res)
		}
	})
	for i := range n {
		name := "grpc-go"
		if i < len(names) {
			name = names[i]
		}
		if errs[i] != nil || got[i] != l.First("race") {
			t.Errorf("racer %d (%s): execution %d, %v; the first execution was %d", i, name, got[i], errs[i], l.First("race"))
		}
	}
	if l.Runs("race") != 1 {
		t.Fatalf("%d executions of one key", l.Runs("race"))
	}
}

// idem's answers in Connect's shape: codes, details, headers.
func TestAnswers(t *testing.T) {
	t.Parallel()
	eng := engine(t, idem.Policy{OnFailure: idem.OnFailureCache})
	l, addr := serve(t, eng)
	for protocol := range protocols {
		t.Run(protocol, func(t *testing.T) {
			c := client(t, addr, protocol, idemconnect.ClientOptions{MaxAttempts: 1})
			key := func(s string) string { return protocol + "-" + s }
			ctx := context.Background()
			first, err := call(ctx, c, "alice", key("k1"), rpctest.Transfer(key("a"), 1))
			if err != nil {
				t.Fatal(err)
			}
			exp := first.Header().Get("Idempotency-Key-Expires")
			if when, err := http.ParseTime(exp); err != nil || when.Before(time.Now().Add(23*time.Hour)) || first.Header().Get("Idempotent-Replayed") != "" {
				t.Fatalf("first answer's headers: %v", first.Header())
			}
			again, err := call(ctx, c, "alice", key("k1"), rpctest.Transfer(key("a"), 1))
			if err != nil || rpctest.Execution(again.Msg) != rpctest.Execution(first.Msg) || again.Header().Get("Idempotent-Replayed") != "true" || again.Header().Get("Idempotency-Key-Expires") == "" {
				t.Fatalf("replay: %v %v", err, again)
			}
			_, err = call(ctx, c, "alice", key("k1"), rpctest.Transfer(key("a"), 2))
			if connect.CodeOf(err) != connect.CodeFailedPrecondition || idemconnect.ProblemKind(err) != "payload_mismatch" {
				t.Fatalf("mismatch: %v", err)
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Meta().Get("Idempotency-Key-Expires") == "" {
				t.Fatalf("mismatch without its expiry: %v", err)
			}
			_, err = call(ctx, connect.NewClient[structpb.Struct, structpb.Struct](http.DefaultClient, "http://"+addr+rpctest.Procedure), "", key("k2"), rpctest.Transfer(key("b"), 1))
			if protocol == "connect-http1" && (connect.CodeOf(err) != connect.CodeUnauthenticated || idemconnect.ProblemKind(err) != "tenant_required") {
				t.Fatalf("no credentials: %v", err)
			}

			// in_progress: Aborted with RetryInfo.
			slow := rpctest.Transfer(key("slow"), 1)
			slow.Fields["sleep_ms"] = structpb.NewNumberValue(1500)
			done := make(chan error, 1)
			go func() { _, err := call(ctx, c, "alice", key("k3"), slow); done <- err }()
			if !l.WaitBegun(key("slow")) {
				t.Fatalf("the first call never began: %v", <-done)
			}
			_, err = call(ctx, c, "alice", key("k3"), slow)
			if connect.CodeOf(err) != connect.CodeAborted || idemconnect.ProblemKind(err) != "in_progress" {
				t.Fatalf("in progress: %v; the first: %v", err, <-done)
			}
			var retry *errdetails.RetryInfo
			for _, d := range err.(*connect.Error).Details() {
				if m, _ := d.Value(); m != nil {
					if r, ok := m.(*errdetails.RetryInfo); ok {
						retry = r
					}
				}
			}
			if retry == nil || retry.RetryDelay.AsDuration() < time.Second {
				t.Fatalf("in progress without RetryInfo: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}

			// A failure the policy keeps is replayed as it was.
			fail := rpctest.Transfer(key("f"), 1)
			fail.Fields["fail"] = structpb.NewNumberValue(float64(connect.CodeInvalidArgument))
			_, err1 := call(ctx, c, "alice", key("k4"), fail)
			_, err2 := call(ctx, c, "alice", key("k4"), fail)
			if connect.CodeOf(err1) != connect.CodeInvalidArgument || connect.CodeOf(err2) != connect.CodeInvalidArgument ||
				err2.(*connect.Error).Message() != err1.(*connect.Error).Message() || l.Runs(key("f")) != 1 {
				t.Fatalf("kept failure: %v, then %v (%d runs)", err1, err2, l.Runs(key("f")))
			}
		})
	}
}
