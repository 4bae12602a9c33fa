// Package killtest runs broker consumers (and schedule runners) as
// separate processes and kills them with SIGKILL in the middle of a
// handler, or after an outcome is recorded but before its ack, to check
// that every event runs exactly once and none is lost. The consumers share an idem PostgreSQL store; each
// event's effect is a row written by the handler, so a second run shows as
// a second row.
//
// A test's TestMain hands control to the child when Child returns a
// harness; the test itself calls Run with a function that publishes the
// events and one that reports whether the broker still holds any.
//
// Kills are placed, not timed: a consumer announces on its stdout that it
// is inside a handler (before the effect is written) or past a recorded
// outcome (before the ack), and waits for the parent's answer on stdin; the
// parent answers or kills it. So a kill always lands where it means to,
// however busy the machine is.
package killtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testenv"
	"github.com/idem-dev/idem/store/postgres"
	"github.com/idem-dev/idem/store/postgres/pgtx"
	"github.com/idem-dev/idem/trigger"
)

// The environment of a consumer process.
const (
	envChild  = "IDEM_KILLTEST_CHILD" // the consumer's number
	envDSN    = "IDEM_KILLTEST_DSN"
	envSchema = "IDEM_KILLTEST_SCHEMA"
)

// Lease is the idem lease of the consumers: how long a killed consumer's
// event stays blocked before another consumer takes it over.
const Lease = 3 * time.Second

// Config describes a run.
type Config struct {
	Events    int // events published
	Consumers int // consumer processes alive at any time
	// KillInHandler and KillAfterRecord: the number of consumers killed
	// inside a handler, and after a recorded outcome but before its ack.
	KillInHandler, KillAfterRecord int
	// ChildEnv is passed to every consumer (broker addresses, names).
	ChildEnv []string
	Timeout  time.Duration
}

// Harness is what a consumer process gets.
type Harness struct {
	Number  int
	Starter *trigger.Starter
	pool    *pgxpool.Pool
	schema  string
	mu      sync.Mutex // one announcement and answer at a time
	in      *bufio.Reader
}

// Child returns the harness of a consumer process, or nil in the test
// process itself. The context ends on SIGTERM.
func Child() (*Harness, context.Context) {
	n, err := strconv.Atoi(os.Getenv(envChild))
	if err != nil {
		return nil, nil
	}
	ctx, _ := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	pool, err := pgxpool.New(ctx, os.Getenv(envDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, "killtest child:", err)
		os.Exit(2)
	}
	schema := os.Getenv(envSchema)
	s, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		fmt.Fprintln(os.Stderr, "killtest child:", err)
		os.Exit(2)
	}
	eng := idem.New(s, idem.Policy{Lease: Lease, CleanupInterval: -1})
	return &Harness{
		Number:  n,
		Starter: &trigger.Starter{Engine: eng, Scope: "events"},
		pool:    pool,
		schema:  schema,
		in:      bufio.NewReader(os.Stdin),
	}, ctx
}

// announce tells the parent where this consumer is and waits for its
// answer; the parent may kill the process instead of answering.
func (h *Harness) announce(what, eventID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := fmt.Fprintf(os.Stdout, "%s %s\n", what, eventID); err != nil {
		return err
	}
	_, err := h.in.ReadString('\n')
	return err
}

// Effect is the handler's work: announced (a kill here is a kill mid
// handler, before the effect), then one row per run of the event.
func (h *Harness) Effect(ctx context.Context, eventID string) error {
	if err := h.announce("H", eventID); err != nil {
		return err
	}
	_, err := h.pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{h.schema, "effects"}.Sanitize()+" (event_id, consumer) VALUES ($1, $2)", eventID, h.Number)
	return err
}

// Recorded is called after an event's outcome is recorded and before its
// ack (a kill here loses the ack).
func (h *Harness) Recorded(eventID string) { h.announce("R", eventID) }

// EventID is the ID of the i-th event.
func EventID(i int) string { return fmt.Sprintf("evt_%04d", i) }

// DB is a fresh schema for one test: idem's records table, and an effects
// table with one row per run of the work being counted.
type DB struct {
	Pool *pgxpool.Pool
	// Effects is the effects table's qualified name: (event_id text,
	// consumer int, at timestamptz).
	Effects string
	// Records is idem's records table's qualified name.
	Records string
	// RunLog is a run log (pgtx.RunLog) in the schema, created.
	RunLog pgtx.RunLog
	dsn    string
	schema string
}

// Env is the environment of a child process: the test process's, plus
// where the store is.
func (db *DB) Env() []string {
	return append(os.Environ(), envDSN+"="+db.dsn, envSchema+"="+db.schema)
}

// Command returns the command of child process n (not started): this test
// binary, with the child's environment and env added.
func (db *DB) Command(n int, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(db.Env(), envChild+"="+strconv.Itoa(n)), env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// Setup creates the schema (dropped when t ends).
func Setup(t *testing.T) *DB {
	t.Helper()
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := fmt.Sprintf("idem_killtest_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	if err := postgres.Migrate(ctx, pool, postgres.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+effects+" (event_id text NOT NULL, consumer int NOT NULL, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		t.Fatal(err)
	}
	runs := pgtx.RunLog{Table: pgx.Identifier{schema, "runs"}}
	if err := runs.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return &DB{Pool: pool, Effects: effects, Records: pgx.Identifier{schema, postgres.DefaultTable}.Sanitize(), RunLog: runs, dsn: dsn, schema: schema}
}

// Run starts cfg.Consumers consumer processes, publishes the events, kills
// consumers as cfg says (starting a replacement for each), waits until
// every event's effect is written and drained reports the broker empty,
// and checks that each event ran exactly once.
func Run(t *testing.T, cfg Config, publish func(ids []string), drained func() bool) {
	db := Setup(t)
	pool, effects, ctx := db.Pool, db.Effects, context.Background()
	schema := db.schema

	p := &parent{t: t, cfg: cfg, env: append(db.Env(), cfg.ChildEnv...)}
	t.Cleanup(p.killAll)
	for range cfg.Consumers {
		p.spawn()
	}
	ids := make([]string, cfg.Events)
	for i := range ids {
		ids[i] = EventID(i)
	}
	publish(ids)

	deadline := time.Now().Add(cfg.Timeout)
	var distinct, rows int
	for {
		if err := pool.QueryRow(ctx, "SELECT count(DISTINCT event_id), count(*) FROM "+effects).Scan(&distinct, &rows); err != nil {
			t.Fatal(err)
		}
		if distinct == cfg.Events && drained() && p.killsDone() {
			break
		}
		if time.Now().After(deadline) {
			p.mu.Lock()
			kh, kr := p.killedH, p.killedR
			p.mu.Unlock()
			t.Fatalf("after %v: %d of %d events ran (%d effects); kills %d/%d in handler, %d/%d after record",
				cfg.Timeout, distinct, cfg.Events, rows, kh, cfg.KillInHandler, kr, cfg.KillAfterRecord)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Give a late duplicate the time to show.
	time.Sleep(time.Second)
	p.stopAll()

	dup, err := pool.Query(ctx, "SELECT event_id, count(*) FROM "+effects+" GROUP BY 1 HAVING count(*) <> 1 ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for dup.Next() {
		var id string
		var n int
		dup.Scan(&id, &n)
		t.Errorf("%s ran %d times", id, n)
	}
	dup.Close()
	if err := pool.QueryRow(ctx, "SELECT count(DISTINCT event_id), count(*) FROM "+effects).Scan(&distinct, &rows); err != nil {
		t.Fatal(err)
	}
	if distinct != cfg.Events || rows != cfg.Events {
		t.Fatalf("%d distinct events ran, %d runs; want %d once each", distinct, rows, cfg.Events)
	}
	var stored int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "idem_records"}.Sanitize()+" WHERE state = 'succeeded'").Scan(&stored); err != nil {
		t.Logf("counting records: %v", err)
	} else if stored != cfg.Events {
		t.Errorf("%d succeeded records, want %d", stored, cfg.Events)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("%d events, %d consumer processes started, %d killed in a handler and %d after recording (SIGKILL); %d handler entries, %d recorded acks announced; each event ran once",
		cfg.Events, p.started, p.killedH, p.killedR, p.entries, p.records)
}

type parent struct {
	t   *testing.T
	cfg Config
	env []string

	mu       sync.Mutex
	children map[int]*child // guarded by mu
	started  int            // guarded by mu
	entries  int            // H lines, guarded by mu
	records  int            // R lines, guarded by mu
	killedH  int            // guarded by mu
	killedR  int            // guarded by mu
	stopping bool           // guarded by mu
	wg       sync.WaitGroup
}

type child struct {
	n     int
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (p *parent) killsDone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killedH >= p.cfg.KillInHandler && p.killedR >= p.cfg.KillAfterRecord
}

// spawn starts a consumer process. Call without p.mu.
func (p *parent) spawn() {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return
	}
	p.started++
	n := p.started
	p.mu.Unlock()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// Clipped: spawns run at once (a dead consumer's replacement is
	// started from its reader's goroutine), and an append into p.env's
	// spare capacity would hand one child another's number.
	cmd.Env = append(slices.Clip(p.env), envChild+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		p.t.Error(err)
		return
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Error(err)
		return
	}
	if err := cmd.Start(); err != nil {
		p.t.Error(err)
		return
	}
	c := &child{n: n, cmd: cmd, stdin: stdin}
	p.mu.Lock()
	if p.children == nil {
		p.children = map[int]*child{}
	}
	p.children[n] = c
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if !p.answer(c, sc.Text()) {
				break
			}
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
	}()
}

// answer decides what a consumer's announcement gets: "go", or SIGKILL.
// It reports whether to keep reading the child.
func (p *parent) answer(c *child, line string) bool {
	what, _, _ := strings.Cut(line, " ")
	p.mu.Lock()
	kill := false
	switch what {
	case "H":
		p.entries++
		// Spread the kills over the run: one every few dozen handlers.
		if p.killedH < p.cfg.KillInHandler && p.entries%(p.cfg.Events/(2*p.cfg.KillInHandler+1)+1) == 0 {
			p.killedH++
			kill = true
		}
	case "R":
		p.records++
		if p.killedR < p.cfg.KillAfterRecord && p.records%(p.cfg.Events/(2*p.cfg.KillAfterRecord+1)+3) == 0 {
			p.killedR++
			kill = true
		}
	}
	if kill {
		delete(p.children, c.n)
	}
	p.mu.Unlock()
	if kill {
		c.cmd.Process.Signal(syscall.SIGKILL)
		p.spawn()
		return false
	}
	fmt.Fprintln(c.stdin, "go")
	return true
}

// stopAll stops every consumer with SIGTERM (they drain and exit), and
// kills those that do not exit within 10 s.
func (p *parent) stopAll() {
	p.mu.Lock()
	p.stopping = true
	var cs []*child
	for _, c := range p.children {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.cmd.Process.Signal(syscall.SIGTERM)
		c.stdin.Close()
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.killAll()
		<-done
	}
}

func (p *parent) killAll() {
	p.mu.Lock()
	p.stopping = true
	for _, c := range p.children {
		c.cmd.Process.Kill()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
