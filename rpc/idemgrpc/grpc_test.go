package idemgrpc_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/testkit"
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

// serve starts the ledger on a grpc-go server over TCP, with the
// interceptor when eng is set (without it: the control).
func serve(t *testing.T, eng *idem.Engine) (*rpctest.Ledger, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if eng != nil {
		opts = append(opts, grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(eng, idemgrpc.ServerOptions{})))
	}
	s := grpc.NewServer(opts...)
	l := rpctest.NewLedger()
	s.RegisterService(&rpctest.ServiceDesc, l)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return l, ln.Addr().String()
}

func engine(t *testing.T, p idem.Policy) *idem.Engine {
	t.Helper()
	p.CleanupInterval = -1
	eng := idem.New(memory.New(), p)
	t.Cleanup(func() { eng.Close() })
	return eng
}

// dial connects through addr with the client interceptor; reconnections
// are quick, since the proxy breaks connections on purpose.
func dial(t *testing.T, addr string, o idemgrpc.ClientOptions) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(o)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.2, MaxDelay: 50 * time.Millisecond}, MinConnectTimeout: 5 * time.Second}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func as(ctx context.Context, user string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+user)
}

func transfer(ctx context.Context, cc *grpc.ClientConn, req *structpb.Struct, opts ...grpc.CallOption) (*structpb.Struct, error) {
	res := new(structpb.Struct)
	err := cc.Invoke(ctx, rpctest.Procedure, req, res, opts...)
	return res, err
}

var fast = idemgrpc.ClientOptions{MaxAttempts: 100, Backoff: func(int) time.Duration { return 5 * time.Millisecond }}

// lostAnswers sends n transfers, four at a time, through a proxy that
// loses one answer in three, and returns what each got.
func lostAnswers(t *testing.T, eng *idem.Engine, n int) (*rpctest.Ledger, *rpctest.Proxy, []*structpb.Struct, []error) {
	l, addr := serve(t, eng)
	p := rpctest.NewProxy(t, addr, 3)
	cc := dial(t, p.Addr, fast)
	res, errs := rpctest.SendTransfers(n, func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
		return transfer(as(ctx, "alice"), cc, req, grpc.WaitForReady(true))
	})
	return l, p, res, errs
}

// Answers lost after the server ran the call: the client calls again with
// the key, and the call runs once; each caller ends with its first
// execution's outcome.
func TestLostAnswersRunOnce(t *testing.T) {
	t.Parallel()
	l, p, res, errs := lostAnswers(t, engine(t, idem.Policy{}), 24)
	rpctest.CheckRanOnce(t, l, p, res, errs)
}

// The control: the same client, keys and retries, without the server's
// interceptor. Lost answers make duplicate transfers.
func TestLostAnswersWithoutInterceptorRunTwice(t *testing.T) {
	t.Parallel()
	const n = 24
	l, p, _, _ := lostAnswers(t, nil, n)
	if l.Duplicates() == 0 || p.Lost() == 0 {
		t.Fatalf("%d duplicates after %d lost answers: the control shows nothing", l.Duplicates(), p.Lost())
	}
	t.Logf("without the interceptor: %d executions for %d transfers (%d lost answers)", l.Total(), n, p.Lost())
}

// Racers on one key: one execution, and every racer gets its outcome
// (those that came while it ran wait out in_progress and get the replay).
func TestRacersOnOneKey(t *testing.T) {
	t.Parallel()
	l, addr := serve(t, engine(t, idem.Policy{}))
	cc := dial(t, addr, idemgrpc.ClientOptions{MaxAttempts: 30})
	const n = 16
	res, errs := make([]*structpb.Struct, n), make([]error, n)
	req := rpctest.Transfer("race", 5)
	req.Fields["sleep_ms"] = structpb.NewNumberValue(300)
	testkit.FanOut(n, func(i int) {
		ctx := idemgrpc.WithKey(as(context.Background(), "alice"), "race-key")
		res[i], errs[i] = transfer(ctx, cc, req)
	})
	for i := range n {
		if errs[i] != nil || rpctest.Execution(res[i]) != l.First("race") {
			t.Errorf("racer %d: %s; the first execution was %d", i, rpctest.Describe(res[i], errs[i]), l.First("race"))
		}
	}
	if l.Runs("race") != 1 {
		t.Fatalf("%d executions of one key", l.Runs("race"))
	}
}

func errorInfo(t *testing.T, err error) (*errdetails.ErrorInfo, *errdetails.RetryInfo) {
	t.Helper()
	var ei *errdetails.ErrorInfo
	var ri *errdetails.RetryInfo
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			ei = d
		case *errdetails.RetryInfo:
			ri = d
		}
	}
	if ei == nil {
		t.Fatalf("%v: no ErrorInfo", err)
	}
	return ei, ri
}

// idem's own answers: their codes and details, the metadata of first
// answers and replays.
func TestAnswers(t *testing.T) {
	t.Parallel()
	eng := engine(t, idem.Policy{OnFailure: idem.OnFailureCache})
	l, addr := serve(t, eng)
	cc := dial(t, addr, idemgrpc.ClientOptions{MaxAttempts: 1})
	ctx := as(context.Background(), "alice")

	var hdr metadata.MD
	first, err := transfer(idemgrpc.WithKey(ctx, "k1"), cc, rpctest.Transfer("a", 1), grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	exp := hdr.Get("idempotency-key-expires")
	if len(exp) != 1 || len(hdr.Get("idempotent-replayed")) != 0 {
		t.Fatalf("first answer's metadata: %v", hdr)
	}
	if when, err := time.Parse(time.RFC1123, exp[0]); err != nil || when.Before(time.Now().Add(23*time.Hour)) {
		t.Fatalf("first answer's expiry %q (%v): want a day from now", exp[0], err)
	}
	var rhdr metadata.MD
	again, err := transfer(idemgrpc.WithKey(ctx, "k1"), cc, rpctest.Transfer("a", 1), grpc.Header(&rhdr))
	if err != nil || rpctest.Execution(again) != rpctest.Execution(first) {
		t.Fatalf("replay: %s, first %s", rpctest.Describe(again, err), rpctest.Describe(first, nil))
	}
	if rhdr.Get("idempotent-replayed")[0] != "true" || len(rhdr.Get("idempotency-key-expires")) != 1 {
		t.Fatalf("replay's metadata: %v", rhdr)
	}

	// Another message with the key: FailedPrecondition payload_mismatch.
	_, err = transfer(idemgrpc.WithKey(ctx, "k1"), cc, rpctest.Transfer("a", 2))
	if status.Code(err) != codes.FailedPrecondition || idemgrpc.ProblemKind(err) != "payload_mismatch" {
		t.Fatalf("mismatch: %v (%q)", err, idemgrpc.ProblemKind(err))
	}
	if ei, _ := errorInfo(t, err); ei.Reason != "PAYLOAD_MISMATCH" || ei.Domain != "idem.dev" || ei.Metadata["key_expires_at"] == "" {
		t.Fatalf("mismatch's ErrorInfo: %v", ei)
	}

	// Another caller with the same key has a key space of its own.
	bob, err := transfer(idemgrpc.WithKey(as(context.Background(), "bob"), "k1"), cc, rpctest.Transfer("a", 1))
	if err != nil || rpctest.Execution(bob) == rpctest.Execution(first) {
		t.Fatalf("bob with alice's key: %s", rpctest.Describe(bob, err))
	}

	// A caller without credentials: Unauthenticated.
	_, err = transfer(idemgrpc.WithKey(context.Background(), "k2"), cc, rpctest.Transfer("b", 1))
	if status.Code(err) != codes.Unauthenticated || idemgrpc.ProblemKind(err) != "tenant_required" {
		t.Fatalf("no credentials: %v", err)
	}
	// An invalid key: InvalidArgument.
	_, err = transfer(idemgrpc.WithKey(ctx, strings.Repeat("k", 300)), cc, rpctest.Transfer("b", 1))
	if status.Code(err) != codes.InvalidArgument || idemgrpc.ProblemKind(err) != "invalid_key" {
		t.Fatalf("invalid key: %v", err)
	}

	// Two keys: InvalidArgument, nothing runs.
	_, err = transfer(idemgrpc.WithKey(idemgrpc.WithKey(ctx, "k6"), "k7"), cc, rpctest.Transfer("two", 1))
	if status.Code(err) != codes.InvalidArgument || idemgrpc.ProblemKind(err) != "multiple_keys" || l.Runs("two") != 0 {
		t.Fatalf("two keys: %v, %d runs", err, l.Runs("two"))
	}

	// in_progress: Aborted with RetryInfo and grpc-go's pushback trailer.
	slow := rpctest.Transfer("slow", 1)
	slow.Fields["sleep_ms"] = structpb.NewNumberValue(2000)
	done := make(chan error, 1)
	go func() { _, err := transfer(idemgrpc.WithKey(ctx, "k3"), cc, slow); done <- err }()
	var trailer metadata.MD
	if !l.WaitBegun("slow") {
		t.Fatalf("the first call never began: %v", <-done)
	}
	_, err = transfer(idemgrpc.WithKey(ctx, "k3"), cc, slow, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Aborted || idemgrpc.ProblemKind(err) != "in_progress" {
		t.Fatalf("in progress: %v", err)
	}
	if _, ri := errorInfo(t, err); ri == nil || ri.RetryDelay.AsDuration() < time.Second {
		t.Fatalf("in progress: RetryInfo %v", ri)
	}
	if len(trailer.Get("grpc-retry-pushback-ms")) != 1 {
		t.Fatalf("in progress: trailer %v", trailer)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A failure kept by the policy is replayed with its code and message.
	fail := rpctest.Transfer("f", 1)
	fail.Fields["fail"] = structpb.NewNumberValue(float64(codes.InvalidArgument))
	_, err1 := transfer(idemgrpc.WithKey(ctx, "k4"), cc, fail)
	_, err2 := transfer(idemgrpc.WithKey(ctx, "k4"), cc, fail)
	if status.Code(err1) != codes.InvalidArgument || status.Convert(err2).Message() != status.Convert(err1).Message() || l.Runs("f") != 1 {
		t.Fatalf("kept failure: %v, then %v (%d runs)", err1, err2, l.Runs("f"))
	}
	// Unavailable says nothing ran: the key is released, a retry runs.
	fail.Fields["ref"] = structpb.NewStringValue("u")
	fail.Fields["fail"] = structpb.NewNumberValue(float64(codes.Unavailable))
	for range 2 {
		if _, err := transfer(idemgrpc.WithKey(ctx, "k5"), cc, fail); status.Code(err) != codes.Unavailable {
			t.Fatalf("unavailable: %v", err)
		}
	}
	if l.Runs("u") != 2 {
		t.Fatalf("a released key ran %d times, want 2", l.Runs("u"))
	}
}

// With grpc-go's own retry policy doing the retries (the interceptor only
// attaches the key: MaxAttempts 1): its attempts resend the same
// metadata, so racers on one key still run it once, and in_progress
// (ABORTED) is retried after the server's pushback, until the replay.
func TestWithGRPCRetryPolicy(t *testing.T) {
	t.Parallel()
	l, addr := serve(t, engine(t, idem.Policy{}))
	const config = `{"methodConfig": [{"name": [{"service": "idem.test.Ledger"}], "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}]}`
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(config),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{MaxAttempts: 1})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	const n = 8
	req := rpctest.Transfer("policy", 1)
	req.Fields["sleep_ms"] = structpb.NewNumberValue(300)
	res, errs := make([]*structpb.Struct, n), make([]error, n)
	testkit.FanOut(n, func(i int) {
		res[i], errs[i] = transfer(idemgrpc.WithKey(as(context.Background(), "alice"), "policy-key"), cc, req)
	})
	for i := range n {
		if errs[i] != nil || rpctest.Execution(res[i]) != l.First("policy") {
			t.Errorf("racer %d: %s; the first execution was %d", i, rpctest.Describe(res[i], errs[i]), l.First("policy"))
		}
	}
	if l.Runs("policy") != 1 {
		t.Fatalf("%d executions of one key", l.Runs("policy"))
	}
}

// A caller has one key space over HTTP and gRPC: the interceptor scopes
// keys by the HTTP middleware's credential rule. Alice's key used over
// HTTP is bound to its endpoint, so her gRPC call with it is refused
// (key_reused); Bob's call with the same key is his own.
func TestOneKeySpaceWithHTTP(t *testing.T) {
	t.Parallel()
	eng := engine(t, idem.Policy{})
	l, addr := serve(t, eng)
	h := idemhttp.Middleware(eng, idemhttp.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", "shared-key")
	res, err := srv.Client().Do(req)
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("over HTTP: %v %v", res, err)
	}
	res.Body.Close()
	cc := dial(t, addr, idemgrpc.ClientOptions{MaxAttempts: 1})
	_, err = transfer(idemgrpc.WithKey(as(context.Background(), "alice"), "shared-key"), cc, rpctest.Transfer("x", 1))
	if status.Code(err) != codes.FailedPrecondition || idemgrpc.ProblemKind(err) != "key_reused" || l.Runs("x") != 0 {
		t.Fatalf("alice's HTTP key over gRPC: %v, %d runs", err, l.Runs("x"))
	}
	if _, err := transfer(idemgrpc.WithKey(as(context.Background(), "bob"), "shared-key"), cc, rpctest.Transfer("x", 1)); err != nil || l.Runs("x") != 1 {
		t.Fatalf("bob's call: %v, %d runs", err, l.Runs("x"))
	}
}
