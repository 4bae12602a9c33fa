package idemgrpc_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testdb"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/rpc/idemgrpc"
	"github.com/idem-dev/idem/rpc/internal/rpctest"
	"github.com/idem-dev/idem/store/postgres"
)

const killChildEnv = "IDEMGRPC_KILL_CHILD"

// killChild is the server the kill and process tests run as a process
// of its own (rpctest.Child), behind grpc-go.
func killChild(spec string) {
	c, err := rpctest.OpenChild(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	after := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		res, err := handler(ctx, req)
		c.Recorded(req.(*structpb.Struct))
		return res, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(after, idemgrpc.UnaryServerInterceptor(c.Engine, idemgrpc.ServerOptions{})))
	srv.RegisterService(&rpctest.ServiceDesc, c)
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_ = srv.Serve(ln)
}

// The server process is killed with SIGKILL while a call's client waits:
// once after the handler's outcome was recorded and before the answer
// left, once inside the handler before its effect. The client calls again
// with its key until a restarted server answers. Each call's effect
// happens once, and its client ends with that execution's outcome.
func TestServerKilled(t *testing.T) {
	t.Parallel()
	dir, addr := t.TempDir(), freePort(t)
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
			runs := rpctest.Effects(t, dir, ref)
			if len(runs) != 1 || fmt.Sprint(rpctest.Execution(a.res)) != runs[0] {
				t.Fatalf("executions %v; the client got %s", runs, rpctest.Describe(a.res, nil))
			}
		})
	}
	kill(server)
}

// freePort returns an address of 127.0.0.1 no one listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Two server processes on one PostgreSQL store, and callers racing on one
// key through both: the call runs once across the processes, and every
// caller ends with its outcome.
func TestProcessesRaceOnOneKey(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	pool := testdb.PostgresPool(t, dsn, 2)
	schema := fmt.Sprintf("idem_rpc_%d_%d", os.Getpid(), time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.Migrate(ctx, pool, postgres.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	dir := t.TempDir()
	var conns []*grpc.ClientConn
	for i := range 2 {
		addr := freePort(t)
		if c := testkit.StartChild(t, killChildEnv+"="+rpctest.ChildSpec(dir, addr, i, dsn, schema)); !c.WaitLine("ready", 30*time.Second) {
			t.Fatal("a server did not start")
		}
		conns = append(conns, dial(t, addr, idemgrpc.ClientOptions{MaxAttempts: 30}))
	}
	const n = 16
	res, errs := make([]*structpb.Struct, n), make([]error, n)
	req := rpctest.Transfer("race", 7)
	req.Fields["sleep_ms"] = structpb.NewNumberValue(300) // the racers find it in progress
	testkit.FanOut(n, func(i int) {
		ctx := idemgrpc.WithKey(as(context.Background(), "alice"), "across-processes")
		res[i], errs[i] = transfer(ctx, conns[i%2], req, grpc.WaitForReady(true))
	})
	runs := rpctest.Effects(t, dir, "race")
	if len(runs) != 1 {
		t.Fatalf("%d executions across the processes: %v", len(runs), runs)
	}
	for i := range n {
		if errs[i] != nil || fmt.Sprint(rpctest.Execution(res[i])) != runs[0] {
			t.Errorf("caller %d (server %d): %s; the execution was %s", i, i%2, rpctest.Describe(res[i], errs[i]), runs[0])
		}
	}
}
