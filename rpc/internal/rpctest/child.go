package rpctest

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/file"
	"github.com/idem-dev/idem/store/postgres"
)

// Child is a server process of the kill and process tests: an engine on
// the file store in Dir (or, with a DSN, the PostgreSQL store of a
// schema), and the ledger's Transfer with its effects appended (and
// synced) to Dir/effects, one line per execution, so that they outlive
// the process and add up across processes. The process stops where the
// parent wants to kill it and says so on its stdout: "before REF" inside
// Transfer before the effect of a ref starting with "hold-", "recorded
// REF" in Recorded (which the framework's server calls once the
// interceptor returned, before the answer is sent) for a ref starting
// with "kill-"; only in the process whose generation ends the ref, so
// that the restarted one answers.
type Child struct {
	Engine *idem.Engine
	Addr   string

	dir, gen string
	mu       sync.Mutex
	effects  *os.File
	seq      int
	stdin    *bufio.Scanner
}

// ChildSpec is the environment value OpenChild reads: where its store
// and effects are, its address and generation, and the PostgreSQL
// server and schema ("" for the file store).
func ChildSpec(dir, addr string, gen int, dsn, schema string) string {
	return url.Values{"dir": {dir}, "addr": {addr}, "gen": {fmt.Sprint(gen)}, "dsn": {dsn}, "schema": {schema}}.Encode()
}

// OpenChild opens the child's store and effects as spec says.
func OpenChild(spec string) (*Child, error) {
	q, err := url.ParseQuery(spec)
	if err != nil {
		return nil, err
	}
	c := &Child{Addr: q.Get("addr"), dir: q.Get("dir"), gen: q.Get("gen"), stdin: bufio.NewScanner(os.Stdin)}
	var st store.Store
	if dsn := q.Get("dsn"); dsn != "" {
		pool, err := pgxpool.New(context.Background(), dsn)
		if err != nil {
			return nil, err
		}
		if st, err = postgres.New(pool, postgres.Options{Schema: q.Get("schema")}); err != nil {
			return nil, err
		}
	} else if st, err = file.Open(filepath.Join(c.dir, "store"), file.Options{}); err != nil {
		return nil, err
	}
	c.Engine = idem.New(st, idem.Policy{Lease: 2 * time.Second, CleanupInterval: -1})
	if c.effects, err = os.OpenFile(filepath.Join(c.dir, "effects"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Child) stopsAt(ref, prefix string) bool {
	return strings.HasPrefix(ref, prefix) && strings.HasSuffix(ref, "-"+c.gen)
}

func (c *Child) stop(line string) {
	fmt.Println(line)
	c.stdin.Scan() // the parent kills the process here
}

// Transfer is the ledger's method: it writes its effect durably and
// answers the execution's number, unique across processes.
func (c *Child) Transfer(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	ref := req.Fields["ref"].GetStringValue()
	if c.stopsAt(ref, "hold-") {
		c.stop("before " + ref)
	}
	time.Sleep(time.Duration(req.Fields["sleep_ms"].GetNumberValue()) * time.Millisecond)
	c.mu.Lock()
	c.seq++
	exec := os.Getpid()*1000 + c.seq
	_, err := fmt.Fprintf(c.effects, "%s %d\n", ref, exec)
	if err == nil {
		err = c.effects.Sync()
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return structpb.NewStruct(map[string]any{"ref": ref, "execution": float64(exec)})
}

// Recorded is called with a call's request once the interceptor
// returned: its outcome is recorded, its answer not sent yet.
func (c *Child) Recorded(req *structpb.Struct) {
	if ref := req.Fields["ref"].GetStringValue(); c.stopsAt(ref, "kill-") {
		c.stop("recorded " + ref)
	}
}

// Effects reads the executions of ref from dir/effects.
func Effects(t *testing.T, dir, ref string) []string {
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
