package history

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-dev/idem/store"
)

// Config shapes a history. Its zero value is a history of about 900
// operations on 3 keys with 50 ms leases.
type Config struct {
	// Clients is how many goroutines call the store at once, spread in
	// turn over the stores given to Record; 0 means 6.
	Clients int
	// Keys is how many keys they share; 0 means 3. Few keys make races.
	Keys int
	// Ops is how many operations each client runs; 0 means 150.
	Ops int
	// Lease is the short lease of most reservations and renewals, short
	// enough that holders who stop renewing are taken over during a
	// history; 0 means 50 ms. Now and then a reservation holds ten times
	// longer.
	Lease time.Duration
	// Slack is how much earlier than the history's clock a store may judge
	// a lease over, for the rounding of the times it keeps; 0 means 2 ms.
	Slack time.Duration
	// Timeout bounds each call; one that takes longer counts as maybe
	// applied. 0 means 10 s.
	Timeout time.Duration
	// Scope is the scope of the keys; "" means "history". Keys are made
	// unique per history.
	Scope string
	// NoStaleReleases keeps clients from releasing an in_progress record,
	// whose lease may run out meanwhile: they release only records they
	// failed. It is for backends whose deletes are not conditional
	// (gofakes3 ignores If-Match on DeleteObject), where a release racing
	// a takeover deletes the new holder's record (see store/s3).
	NoStaleReleases bool
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Clients <= 0 {
		c.Clients = 6
	}
	if c.Keys <= 0 {
		c.Keys = 3
	}
	if c.Ops <= 0 {
		c.Ops = 150
	}
	if c.Lease <= 0 {
		c.Lease = 50 * time.Millisecond
	}
	if c.Slack <= 0 {
		c.Slack = 2 * time.Millisecond
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Scope == "" {
		c.Scope = "history"
	}
	return c
}

// event is a call or a return, as a client logs it: a call before the
// store is called, a return after it answered.
type event struct {
	ID     int64   `json:"id"`
	Client int     `json:"client"`
	T      int64   `json:"t"`             // the history's clock, ns
	In     *input  `json:"in,omitempty"`  // a call
	Out    *output `json:"out,omitempty"` // a return
}

// History is a recorded history of store operations.
type History struct {
	ops   []porcupine.Operation
	slack time.Duration
}

// Record runs cfg.Clients clients of random operations over stores (a nil
// store is skipped; the same store may be given twice) and returns their
// history.
func Record(ctx context.Context, cfg Config, stores ...store.Store) *History {
	cfg = cfg.WithDefaults()
	var ss []store.Store
	for _, s := range stores {
		if s != nil {
			ss = append(ss, s)
		}
	}
	base := time.Now()
	clock := func() int64 { return int64(time.Since(base)) }
	var log eventLog
	w := newWorkload(cfg, keyPrefix(), nil, rand.Uint64()<<24, clock, log.add)
	w.runClients(ctx, cfg, 0, func(i int) store.Store { return ss[i%len(ss)] })
	return &History{ops: operations(log.events, never), slack: cfg.Slack}
}

// eventLog collects the events a workload logs, from its clients'
// goroutines.
type eventLog struct {
	mu     sync.Mutex
	events []event
}

func (l *eventLog) add(e event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func keyPrefix() string { return fmt.Sprintf("h%08x", rand.Uint32()) }

// Check reports whether h is linearizable: Ok, Illegal, or Unknown when
// timeout (0: none) passed first. The information draws the history with
// porcupine.Visualize.
func (h *History) Check(timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	// An operation that may take effect at any time returns just after
	// the last one that did return (and after every call): any effect it
	// has later is seen by nobody, and the drawing keeps its scale.
	// After every call too: an operation that began after every other had
	// returned must not be made to return before it began.
	var last int64
	for _, op := range h.ops {
		last = max(last, op.Call)
		if op.Return != never {
			last = max(last, op.Return)
		}
	}
	ops := slices.Clone(h.ops)
	for i, op := range ops {
		if op.Return == never {
			in := op.Input.(input)
			in.Return = last + 1
			ops[i].Input, ops[i].Return = in, last+1
		}
	}
	return porcupine.CheckOperationsVerbose(model(h.slack), ops, timeout)
}

// Len is the number of operations in h.
func (h *History) Len() int { return len(h.ops) }

// Counts returns how many operations of h ended how: "reserve acquired",
// "reserve took over", "complete lease_lost", "get unknown"...
func (h *History) Counts() map[string]int {
	n := map[string]int{}
	for _, op := range h.ops {
		in, out := op.Input.(input), op.Output.(output)
		what := string(out.Outcome)
		if in.Kind == opReserve && out.Outcome == outOK {
			switch {
			case out.TookOver:
				what = "took over"
			case out.Acquired:
				what = "acquired"
			default:
				what = "refused"
			}
		}
		n[string(in.Kind)+" "+what]++
	}
	return n
}

// summary is Counts as one sorted line.
func (h *History) summary() string {
	var parts []string
	for k, v := range h.Counts() {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// operations pairs events into porcupine's operations. A call with no
// return (its process was killed) returns at end; one that failed with an
// unknown outcome at never, for its effect may come at any time.
func operations(events []event, end int64) []porcupine.Operation {
	calls := map[int64]event{}
	rets := map[int64]event{}
	for _, e := range events {
		if e.In != nil {
			calls[e.ID] = e
		} else if e.Out != nil {
			rets[e.ID] = e
		}
	}
	ops := make([]porcupine.Operation, 0, len(calls))
	for id, c := range calls {
		in := *c.In
		in.Call = c.T
		out := output{Outcome: outUnknown, Err: "no return: killed"}
		in.Return = end
		if r, ok := rets[id]; ok {
			out = *r.Out
			in.Return = r.T
			if out.Outcome == outUnknown {
				in.Return = never
			}
		}
		ops = append(ops, porcupine.Operation{ClientId: c.Client, Input: in, Call: in.Call, Output: out, Return: in.Return})
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

// workload makes the clients of one history.
//
// A key whose record succeeded stays so for the rest of the history, and a
// failed one until its holder releases it, so each of the cfg.Keys slots
// moves on to a fresh key (a new generation) once a client has seen its key
// completed a few times: the clients keep racing on keys that can still
// change. A crash test's processes carry on from the generations the last
// one reached.
type workload struct {
	cfg    Config
	prefix string
	gens   []atomic.Int64 // each slot's current generation
	tokens atomic.Uint64  // the next token's low bits; high bits tell runs apart
	high   uint64
	ids    atomic.Int64
	clock  func() int64
	log    func(event)
	// busy: clients call without pausing, so that many calls are in
	// flight when a crash child is killed.
	busy bool
}

// newWorkload returns a workload on cfg.Keys slots, starting at the
// generations gens (zero when missing).
func newWorkload(cfg Config, prefix string, gens []int64, high uint64, clock func() int64, log func(event)) *workload {
	w := &workload{cfg: cfg, prefix: prefix, gens: make([]atomic.Int64, cfg.Keys), high: high, clock: clock, log: log}
	for i := range min(len(gens), len(w.gens)) {
		w.gens[i].Store(gens[i])
	}
	return w
}

// runClients runs cfg.Clients clients of w at once, numbered from first,
// client i on on(i), each making cfg.Ops calls, and returns when all
// are done.
func (w *workload) runClients(ctx context.Context, cfg Config, first int, on func(i int) store.Store) {
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.client(first+i, on(i)).run(ctx, cfg.Ops)
		}()
	}
	wg.Wait()
}

// generations returns each slot's current generation.
func (w *workload) generations() []int64 {
	gens := make([]int64, len(w.gens))
	for i := range w.gens {
		gens[i] = w.gens[i].Load()
	}
	return gens
}

func (w *workload) key(slot int, gen int64) string {
	return fmt.Sprintf("%s-%d-%d", w.prefix, slot, gen)
}

func (w *workload) client(id int, s store.Store) *client {
	return &client{w: w, id: id, s: s, rng: rand.New(rand.NewPCG(rand.Uint64(), uint64(id))), keys: map[string]*held{}}
}

// held is what a client knows of one key.
type held struct {
	token  uint64   // the token it believes holds the key, or 0
	failed bool     // token's record failed: nothing but its release changes it
	old    []uint64 // tokens it held before, fenced off by now
}

func (h *held) drop() {
	h.failed = false
	if h.token != 0 {
		h.old = append(h.old, h.token)
		if len(h.old) > 4 {
			h.old = h.old[1:]
		}
	}
	h.token = 0
}

// client runs random operations, one at a time.
type client struct {
	w    *workload
	id   int
	s    store.Store
	rng  *rand.Rand
	keys map[string]*held
}

// run runs n operations, or until ctx is done when n < 0, pausing now and
// then so that leases run out.
func (c *client) run(ctx context.Context, n int) {
	for i := 0; (n < 0 || i < n) && ctx.Err() == nil; i++ {
		c.one(ctx)
		if !c.w.busy && c.rng.IntN(2) == 0 {
			time.Sleep(time.Duration(c.rng.Int64N(int64(c.w.cfg.Lease / 5))))
		}
	}
}

// one runs one random operation on the key of a random slot: for a key the
// client holds, mostly renewals, completions and releases; otherwise
// reservations and reads; now and then a write with a token that should
// be fenced off (an old one of its own, or one nobody holds).
func (c *client) one(ctx context.Context) {
	cfg := c.w.cfg
	slot := c.rng.IntN(len(c.w.gens))
	if c.rng.IntN(2) == 0 {
		// Holders get on with their keys more often than others ask.
		for i := range c.w.gens {
			if h := c.keys[c.w.key(i, c.w.gens[i].Load())]; h != nil && h.token != 0 {
				slot = i
			}
		}
	}
	gen := c.w.gens[slot].Load()
	in := input{Key: c.w.key(slot, gen), Slot: slot, Gen: gen}
	h := c.keys[in.Key]
	if h == nil {
		h = &held{}
		c.keys[in.Key] = h
	}
	switch r := c.rng.IntN(100); {
	case h.token != 0 && r < 60, len(h.old) > 0 && r < 4:
		in.Token = h.token
		if r < 4 && len(h.old) > 0 || in.Token == 0 {
			in.Token = h.old[c.rng.IntN(len(h.old))]
		}
		switch c.rng.IntN(5) {
		case 0, 1:
			in.Kind, in.Lease = opRenew, int64(cfg.Lease)
			if c.rng.IntN(3) == 0 {
				in.Lease *= 4
			}
		case 2, 3:
			in.Kind, in.State, in.Value = opComplete, store.Succeeded, fmt.Sprintf("ok-%x", in.Token)
			if c.rng.IntN(2) == 0 {
				in.State, in.Value = store.Failed, fmt.Sprintf("failed-%x", in.Token)
			}
			if c.rng.IntN(10) == 0 {
				in.Value = ""
			}
		case 4:
			in.Kind = opRelease
		}
	case r < 6: // a token nobody holds
		in.Kind, in.Token = opComplete, c.w.high|1<<23|c.rng.Uint64N(1<<23)
		in.State, in.Value = store.Succeeded, "ghost"
	case r < 70:
		in.Kind, in.Token, in.TakeOver = opReserve, c.w.high|c.w.tokens.Add(1), c.rng.IntN(10) < 8
		in.Lease = int64(cfg.Lease)
		if c.rng.IntN(8) == 0 {
			in.Lease *= 10
		}
	default:
		in.Kind = opGet
	}
	if in.Kind == opRelease && cfg.NoStaleReleases && !(in.Token == h.token && h.failed) {
		in.Kind, in.Lease = opRenew, int64(cfg.Lease)
	}
	out := c.call(ctx, in)

	// What the client learnt.
	switch {
	case in.Kind == opReserve && (out.Acquired || out.Outcome == outUnknown):
		// A reservation whose answer was lost may hold the key: its token
		// is tried like any other. A holder of a short lease may also
		// die: its key waits for a takeover.
		h.drop()
		h.token = in.Token
		if in.Lease == int64(cfg.Lease) && c.rng.IntN(4) == 0 {
			h.drop()
		}
	case in.Kind != opReserve && in.Kind != opGet && in.Token == h.token && out.Outcome != outUnknown:
		// A failed record's holder keeps its token: it may release it,
		// as an operator frees an unknown outcome.
		if out.Outcome == outLeaseLost || in.Kind == opRelease || in.Kind == opComplete && in.State == store.Succeeded {
			h.drop()
		} else if in.Kind == opComplete {
			h.failed = true
		}
	}
	if v := out.Record; v != nil && v.State != store.InProgress && c.rng.IntN(4) == 0 ||
		in.Kind == opComplete && in.State == store.Succeeded && out.Outcome == outOK {
		c.w.gens[slot].CompareAndSwap(gen, gen+1)
	}
}

// request is the reservation in makes: the fingerprint and binding are
// mostly the same, so that takeovers happen, and now and then another, so
// that they are refused.
func (c *client) request(in *input) store.ReserveRequest {
	fp, binding := "fp-a", "POST /a"
	if c.rng.IntN(7) == 0 {
		fp = "fp-b"
	}
	if c.rng.IntN(10) == 0 {
		binding = "POST /b"
	}
	scope := c.w.cfg.Scope
	req := store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey(scope, in.Key), Scope: scope, Key: in.Key,
			Fingerprint: fp, Binding: binding, State: store.InProgress,
			Token: in.Token, RequestID: fmt.Sprintf("req-%x", in.Token),
		},
		Lease: time.Duration(in.Lease), TTL: time.Hour, TakeOverStale: in.TakeOver,
	}
	in.Match, in.Ident = match(&req.Record), ident(&req.Record)
	return req
}

func match(r *store.Record) string { return r.Fingerprint + "\x00" + r.Binding }

func ident(r *store.Record) string {
	return strings.Join([]string{r.Fingerprint, r.Binding, r.RequestID, r.Key, r.Scope, r.KeyHash}, "\x00")
}

func viewOf(r *store.Record) *view {
	return &view{State: r.State, Token: r.Token, Ident: ident(r), Value: string(r.Value), Stale: r.Stale()}
}

// call logs in's call, makes it, logs its return and returns it.
func (c *client) call(ctx context.Context, in input) output {
	scope := c.w.cfg.Scope
	f := store.Fence{KeyHash: store.HashKey(scope, in.Key), Scope: scope, Token: in.Token}
	var req store.ReserveRequest
	if in.Kind == opReserve {
		req = c.request(&in)
	}
	timeout := c.w.cfg.Timeout
	if c.rng.IntN(33) == 0 {
		// A call cut short: on a store across a network, it may or may
		// not take effect.
		timeout = time.Duration(c.rng.Int64N(int64(2 * time.Millisecond)))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	id := c.w.ids.Add(1)
	c.w.log(event{ID: id, Client: c.id, T: c.w.clock(), In: &in})
	var out output
	var err error
	switch in.Kind {
	case opReserve:
		var res store.Reservation
		res, err = c.s.Reserve(ctx, req)
		out = output{Acquired: res.Acquired, TookOver: res.TookOver}
		if err == nil && !res.Acquired {
			out.Record = viewOf(&res.Existing)
		}
	case opGet:
		var r store.Record
		r, err = c.s.Get(ctx, scope, f.KeyHash)
		if err == nil {
			out.Record = viewOf(&r)
		}
	case opRenew:
		err = c.s.Renew(ctx, f, time.Duration(in.Lease))
	case opComplete:
		err = c.s.Complete(ctx, store.Completion{Fence: f, State: in.State, Value: []byte(in.Value), TTL: time.Hour})
	case opRelease:
		err = c.s.Release(ctx, f)
	}
	t := c.w.clock()
	switch {
	case err == nil:
		out.Outcome = outOK
	case errors.Is(err, store.ErrLeaseLost) && in.Kind != opReserve && in.Kind != opGet:
		out.Outcome = outLeaseLost
	case errors.Is(err, store.ErrNotFound) && in.Kind == opGet:
		out.Outcome = outNotFound
	default:
		out = output{Outcome: outUnknown, Err: err.Error()}
	}
	c.w.log(event{ID: id, Client: c.id, T: t, Out: &out})
	return out
}
