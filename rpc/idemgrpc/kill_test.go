package idemgrpc_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testdb"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/rpc/idemgrpc"
	"github.com/idem-dev/idem/rpc/internal/rpctest"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/file"
	"github.com/idem-dev/idem/store/postgres"
)

const killChildEnv = "IDEMGRPC_KILL_CHILD"

// killChild is the server the kill and process tests run as a process
// of its own: the ledger behind the interceptor, on the file store in dir
// (or, with dsn, the PostgreSQL store of schema), its effects appended
// (and synced) to dir/effects, one line per execution, so that they
// outlive the process and add up across processes. It stops where the
// parent wants to kill it and says so on its stdout: "before REF" inside
// the handler before the effect of a ref starting with "hold-", "recorded
// REF" once the outcome of a ref starting with "kill-" is recorded and
// before the answer is sent; only in the process whose generation ends
// the ref, so that the restarted one answers. spec is a URL query: dir,
// addr, gen, dsn, schema.
func killChild(spec string) {
	q, err := url.ParseQuery(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, addr, gen := q.Get("dir"), q.Get("addr"), q.Get("gen")
	stopsAt := func(ref, prefix string) bool {
		return strings.HasPrefix(ref, prefix) && strings.HasSuffix(ref, "-"+gen)
	}
	var st store.Store
	if dsn := q.Get("dsn"); dsn != "" {
		pool, perr := pgxpool.New(context.Background(), dsn)
		if perr == nil {
			st, err = postgres.New(pool, postgres.Options{Schema: q.Get("schema")})
		} else {
			err = perr
		}
	} else {
		st, err = file.Open(filepath.Join(dir, "store"), file.Options{})
	}
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
		time.Sleep(time.Duration(req.Fields["sleep_ms"].GetNumberValue()) * time.Millisecond)
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
	dir, addr := t.TempDir(), freePort(t)
	gen := 0
	start := func() *testkit.Child {
		gen++
		spec := url.Values{"dir": {dir}, "addr": {addr}, "gen": {fmt.Sprint(gen)}}
		c := testkit.StartChild(t, killChildEnv+"="+spec.Encode())
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
		spec := url.Values{"dir": {dir}, "addr": {addr}, "gen": {fmt.Sprint(i)}, "dsn": {dsn}, "schema": {schema}}
		if c := testkit.StartChild(t, killChildEnv+"="+spec.Encode()); !c.WaitLine("ready", 30*time.Second) {
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
	runs := effects(t, dir, "race")
	if len(runs) != 1 {
		t.Fatalf("%d executions across the processes: %v", len(runs), runs)
	}
	for i := range n {
		if errs[i] != nil || fmt.Sprint(rpctest.Execution(res[i])) != runs[0] {
			t.Errorf("caller %d (server %d): %s; the execution was %s", i, i%2, rpctest.Describe(res[i], errs[i]), runs[0])
		}
	}
}
