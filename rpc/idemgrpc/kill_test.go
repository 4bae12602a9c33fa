package idemgrpc_test

import (
	"context"
	"fmt"
	"net"
	"os"
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

// The server process is killed with SIGKILL while a call's client waits
// (rpctest.KillServer): the call runs once, and its client ends with it.
func TestServerKilled(t *testing.T) {
	t.Parallel()
	rpctest.KillServer(t, killChildEnv, func(addr string) rpctest.Call {
		cc := dial(t, addr, idemgrpc.ClientOptions{MaxAttempts: 500, Backoff: func(int) time.Duration { return 20 * time.Millisecond }})
		return func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
			return transfer(as(ctx, "alice"), cc, req)
		}
	})
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
		addr := rpctest.FreeAddr(t)
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
