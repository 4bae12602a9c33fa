// Package killtest runs broker consumers (and schedule runners) as
// separate processes and kills them with SIGKILL at the places where a
// crash can repeat or lose work, to check that every event's effect
// happens exactly once and none is lost. The consumers share an idem
// PostgreSQL store; each event's effect is a row written by the handler,
// so a second run shows as a second row.
//
// Kills land inside a handler before its effect; after the effect's
// statement but before its transaction commits; after that commit but
// before idem's record of the outcome (the effect is committed and the
// event will be delivered again); and after the record but before the ack.
// A handler writes its effect as Config.Effect says: with pgtx.RunLog.Once
// (the effect and the event's mark in a run log commit together), or in
// the transaction of the Starter's hold (pgtx.Store.Tx, which commits with
// idem's record).
//
// A test's TestMain hands control to the child when Child returns a
// harness; the test itself calls Run with a function that publishes the
// events and one that reports whether the broker still holds any.
//
// Kills are placed, not timed: a consumer announces on its stdout where it
// is, and waits for the parent's answer on stdin; the parent answers or
// kills it. So a kill always lands where it means to, however busy the
// machine is.
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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store/postgres"
	"github.com/idem-dev/idem/store/postgres/pgtx"
	"github.com/idem-dev/idem/trigger"
)

// The environment of a consumer process.
const (
	envChild  = "IDEM_KILLTEST_CHILD" // the consumer's number
	envDSN    = "IDEM_KILLTEST_DSN"
	envSchema = "IDEM_KILLTEST_SCHEMA"
	envEffect = "IDEM_KILLTEST_EFFECT"
)

// Activity is the activity ID of the consumers' events.
const Activity = "ingest"

// Effect is how a consumer's handler writes an event's effect.
type Effect int

const (
	// RunLog: the effect and the event's mark in a run log commit in one
	// transaction (pgtx.RunLog.Once with trigger.EventKey(Activity,
	// event)), as trigger/nats and trigger/amqp document. A delivery after
	// that commit finds the event handled (trigger.ErrAlreadyStarted).
	RunLog Effect = iota + 1
	// StarterTx: the effect is written in the transaction of the
	// Starter's hold (pgtx.Store.Tx), which idem's record of the outcome
	// commits.
	StarterTx
)

// Lease is the idem lease of the consumers: how long a killed consumer's
// event stays blocked before another consumer takes it over.
const Lease = 3 * time.Second

// Config describes a run.
type Config struct {
	Events    int // events published
	Consumers int // consumer processes alive at any time
	// Effect is how handlers write their effect (Harness.Handle).
	Effect Effect
	// The number of consumers killed: inside a handler, before its
	// effect; after the effect's statement, before its transaction
	// commits; after the effect committed (with its run-log mark: RunLog
	// only), before idem's record; and after the record, before the ack.
	KillInHandler, KillInEffect, KillAfterEffect, KillAfterRecord int
	// ChildEnv is passed to every consumer (broker addresses, names).
	ChildEnv []string
	Timeout  time.Duration
}

// Harness is what a consumer process gets.
type Harness struct {
	Number int
	// Starter's engine is over a pgtx.Store: an operation may write in its
	// transaction.
	Starter *trigger.Starter
	store   *pgtx.Store
	effect  Effect
	runs    pgtx.RunLog
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
	ts := pgtx.New(s)
	eng := idem.New(ts, idem.Policy{Lease: Lease, CleanupInterval: -1})
	effect, _ := strconv.Atoi(os.Getenv(envEffect))
	return &Harness{
		Number:  n,
		Starter: &trigger.Starter{Engine: eng, Scope: "events"},
		store:   ts,
		effect:  Effect(effect),
		runs:    runLog(schema),
		pool:    pool,
		schema:  schema,
		in:      bufio.NewReader(os.Stdin),
	}, ctx
}

func runLog(schema string) pgtx.RunLog {
	return pgtx.RunLog{Table: pgx.Identifier{schema, "runs"}}
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

// Effect is a job's work (the schedule runners'): announced (a kill here
// is a kill mid job, before the effect), then one row per run, written on
// its own.
func (h *Harness) Effect(ctx context.Context, eventID string) error {
	if err := h.announce("H", eventID); err != nil {
		return err
	}
	return h.insert(ctx, h.pool, eventID)
}

// Handle is a consumer's handler of an event, which writes the effect as
// the run's Config.Effect says. It announces itself before the effect
// ("H"), after the effect's statement but before its commit ("E"), and,
// with a run log, after the commit ("C"); a kill can land at each. With a
// run log, an event handled before gets trigger.ErrAlreadyStarted, which
// the handler returns, as the consumers' docs show.
func (h *Harness) Handle(ctx context.Context, eventID string) error {
	if err := h.announce("H", eventID); err != nil {
		return err
	}
	switch h.effect {
	case RunLog:
		err := h.runs.Once(ctx, h.pool, trigger.EventKey(Activity, eventID), func(ctx context.Context, tx pgx.Tx) error {
			if err := h.insert(ctx, tx, eventID); err != nil {
				return err
			}
			return h.announce("E", eventID)
		})
		if err != nil {
			return err
		}
		return h.announce("C", eventID)
	case StarterTx:
		tx, err := h.store.Tx(ctx)
		if err != nil {
			return err
		}
		if err := h.insert(ctx, tx, eventID); err != nil {
			return err
		}
		return h.announce("E", eventID)
	}
	return fmt.Errorf("killtest: no effect mode (%s=%q)", envEffect, os.Getenv(envEffect))
}

func (h *Harness) insert(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, eventID string) error {
	_, err := db.Exec(ctx, "INSERT INTO "+pgx.Identifier{h.schema, "effects"}.Sanitize()+" (event_id, consumer) VALUES ($1, $2)", eventID, h.Number)
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
	runs := runLog(schema)
	if err := runs.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return &DB{Pool: pool, Effects: effects, Records: pgx.Identifier{schema, postgres.DefaultTable}.Sanitize(), RunLog: runs, dsn: dsn, schema: schema}
}

// Run starts cfg.Consumers consumer processes, publishes the events, kills
// consumers as cfg says (starting a replacement for each), waits until
// every event's effect is written and drained reports the broker empty,
// stops the consumers, and checks that the broker is still empty (every
// message was acked) and that each event's effect happened exactly once.
func Run(t *testing.T, cfg Config, publish func(ids []string), drained func() bool) {
	if cfg.Effect != RunLog && cfg.Effect != StarterTx || cfg.Effect == StarterTx && cfg.KillAfterEffect > 0 {
		t.Fatalf("killtest: Effect %d with %d kills after the effect's commit: want RunLog, or StarterTx and none (its effect commits with the record)",
			cfg.Effect, cfg.KillAfterEffect)
	}
	db := Setup(t)
	pool, effects, ctx := db.Pool, db.Effects, context.Background()
	schema := db.schema

	env := append(db.Env(), cfg.ChildEnv...)
	env = append(env, envEffect+"="+strconv.Itoa(int(cfg.Effect)))
	p := &parent{t: t, cfg: cfg, env: env}
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
			t.Fatalf("after %v: %d of %d events ran (%d effects); %s", cfg.Timeout, distinct, cfg.Events, rows, p.kills())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Give a late duplicate the time to show.
	time.Sleep(time.Second)
	p.stopAll()
	// Every message was acked: none is left to the broker once no consumer
	// holds any. A message nak'ed over and over (an event handled, but not
	// acked) can look drained above, between two deliveries.
	for end := time.Now().Add(10 * time.Second); !drained(); {
		if time.Now().After(end) {
			t.Errorf("the broker still holds messages 10 s after every consumer stopped: some were never acked")
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

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
		t.Errorf("counting records: %v", err)
	} else if stored != cfg.Events {
		t.Errorf("%d succeeded records, want %d", stored, cfg.Events)
	}
	if cfg.Effect == RunLog {
		var marks int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+db.RunLog.Table.Sanitize()).Scan(&marks); err != nil {
			t.Errorf("counting the run log: %v", err)
		} else if marks != cfg.Events {
			t.Errorf("the run log holds %d events, want %d", marks, cfg.Events)
		}
	}
	p.mu.Lock()
	entries, records := p.seen["H"], p.seen["R"]
	started := p.started
	p.mu.Unlock()
	t.Logf("%d events, %d consumer processes started; SIGKILL %s; %d handler entries, %d recorded acks announced; each event's effect happened once",
		cfg.Events, started, p.kills(), entries, records)
}

type parent struct {
	t   *testing.T
	cfg Config
	env []string

	mu       sync.Mutex
	children map[int]*child // guarded by mu
	started  int            // guarded by mu
	seen     map[string]int // announcements by place; guarded by mu
	killed   map[string]int // kills by place; guarded by mu
	stopping bool           // guarded by mu
	wg       sync.WaitGroup
}

// A place is where a consumer announces itself and may be killed.
type place struct {
	line string // what the consumer announces
	name string
	// spread: with want kills over n events, one every n/(2*want+1)+spread
	// announcements; places differ so as not to hit the same events.
	spread int
	want   func(Config) int
}

var places = []place{
	{"H", "in a handler", 1, func(c Config) int { return c.KillInHandler }},
	{"E", "after the effect, before its commit", 2, func(c Config) int { return c.KillInEffect }},
	{"C", "after the effect's commit, before the record", 4, func(c Config) int { return c.KillAfterEffect }},
	{"R", "after the record, before the ack", 3, func(c Config) int { return c.KillAfterRecord }},
}

// kills describes the kills so far. Call without p.mu.
func (p *parent) kills() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for i, pl := range places {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d/%d %s", p.killed[pl.line], pl.want(p.cfg), pl.name)
	}
	return b.String()
}

type child struct {
	n     int
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (p *parent) killsDone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pl := range places {
		if p.killed[pl.line] < pl.want(p.cfg) {
			return false
		}
	}
	return true
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
	if p.seen == nil {
		p.seen, p.killed = map[string]int{}, map[string]int{}
	}
	p.seen[what]++
	kill := false
	for _, pl := range places {
		if pl.line != what {
			continue
		}
		// Spread the kills over the run: one every few dozen announcements.
		if want := pl.want(p.cfg); p.killed[what] < want && p.seen[what]%(p.cfg.Events/(2*want+1)+pl.spread) == 0 {
			p.killed[what]++
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
