package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
)

// SkewScenario is the clock-skew test of live holders, the one the
// conformance suite, EngineClockSkew and store/s3 run: two replicas,
// engines over a holder's and a retrier's store client, whose clocks are
// Skews apart. For Keys keys per offset at once, the holder works 2.5
// leases (SkewTracker.Work), renewing as the engine does, while the
// retrier retries the key every quarter lease until it gets the outcome.
// No live holder may be taken over: SkewTracker counts a run that started
// while another run's context was live.
//
// A holder whose renewals do not get through in time (a loaded machine)
// gives its lease up by its own count (idem.ErrLeaseLost), and its key
// may run again after its context ended: that is counted apart (GaveUp,
// Reran). An offset whose holders all gave their lease up tested nothing:
// it runs again, up to Rounds rounds, and fails after the last.
//
// Its assertions are counts of runs and overlaps, never wall-clock
// bounds; its loops are bounded by a count of retries.
type SkewScenario struct {
	// Holder and Retrier are the two replicas' clients of one backend
	// (the same store for a store one process owns).
	Holder, Retrier store.Store
	// Keys is how many keys each offset runs at once.
	Keys int
	// Rounds is how many rounds an offset whose holders all gave their
	// lease up is run; 0 means 1.
	Rounds int
	// WantInProgress also requires of every key whose holder kept its
	// lease that a retry saw it in progress and the last one replayed
	// its outcome.
	WantInProgress bool
	// Serial runs the offsets one after another, each a subtest, so that
	// the holders' renewals compete with fewer others; else all at once.
	Serial bool
	// Options are given to both engines after their clocks.
	Options []idem.Option
}

// SkewKey is what became of one key of a SkewScenario.
type SkewKey struct {
	Runs      int32 // runs of its work
	Overlaps  int32 // runs started while another was live (SkewTracker)
	GaveUp    bool  // a run gave its lease up by its own count
	Conflicts int   // retries that found it in progress
	Replayed  bool  // the last retry replayed the holder's outcome
	Err       error // a holder's or a retry's unexpected error
}

// SkewCounts are an offset's keys in a SkewScenario, over its rounds.
type SkewCounts struct {
	Keys      int // keys run
	Twice     int // keys whose work ran twice while its holder kept its lease
	GaveUp    int // keys whose holder gave its lease up for slow renewals
	Reran     int // of those, keys run again after
	Conflicts int // retries that found a key in progress
	Rounds    int
}

func (c *SkewCounts) add(g *SkewCounts) {
	c.Keys += g.Keys
	c.Twice += g.Twice
	c.GaveUp += g.GaveUp
	c.Reran += g.Reran
	c.Conflicts += g.Conflicts
}

// skewTries bounds the retries of one key: 30 leases of quarter-lease
// waits, long past the holder's 2.5 leases of work.
const skewTries = 120

// Run runs the scenario, reports each key that ran twice, or ended in an
// error, as a test error, logs a table of the counts, and returns them.
func (sc SkewScenario) Run(t *testing.T) map[float64]*SkewCounts {
	counts := map[float64]*SkewCounts{}
	for _, skew := range Skews {
		counts[skew] = &SkewCounts{}
	}
	if sc.Serial {
		for _, skew := range Skews {
			t.Run(fmt.Sprintf("%+g_leases", skew), func(t *testing.T) { sc.rounds(t, []float64{skew}, counts) })
		}
	} else {
		sc.rounds(t, Skews, counts)
	}
	var table []string
	for _, skew := range Skews {
		c := counts[skew]
		table = append(table, fmt.Sprintf("retrier %+5.1f leases: keys run twice %2d of %d in %d rounds; %d holders gave their lease up for slow renewals, %d of their keys ran again after; %d retries answered in progress",
			skew, c.Twice, c.Keys, c.Rounds, c.GaveUp, c.Reran, c.Conflicts))
	}
	t.Logf("lease %v:\n%s", SkewLease, strings.Join(table, "\n"))
	return counts
}

// rounds runs the offsets pending, again while every holder of one gave
// its lease up, up to sc.Rounds rounds, adding to counts.
func (sc SkewScenario) rounds(t *testing.T, pending []float64, counts map[float64]*SkewCounts) {
	for round := 1; len(pending) > 0; round++ {
		got := sc.round(t, pending)
		var again []float64
		for _, skew := range pending {
			c, g := counts[skew], got[skew]
			c.add(g)
			c.Rounds = round
			switch {
			case g.GaveUp < sc.Keys:
			case round < max(sc.Rounds, 1):
				again = append(again, skew)
			default:
				t.Errorf("retrier %+v leases off: every holder gave its lease up in %d rounds: renewals never got through, the test tested nothing", skew, round)
			}
		}
		if len(again) > 0 {
			t.Logf("round %d: every holder gave its lease up at offsets %v (renewals did not get through in time); running them again", round, again)
		}
		pending = again
	}
}

// round runs sc.Keys keys at once at each offset of skews.
func (sc SkewScenario) round(t *testing.T, skews []float64) map[float64]*SkewCounts {
	p := idem.Policy{Lease: SkewLease, TTL: time.Hour, CleanupInterval: -1}
	engine := func(s store.Store, skew float64) *idem.Engine {
		e := idem.New(s, p, append([]idem.Option{idem.WithClock(Skewed(skew))}, sc.Options...)...)
		t.Cleanup(func() { e.Close() })
		return e
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		got = map[float64]*SkewCounts{}
	)
	for _, skew := range skews {
		got[skew] = &SkewCounts{Keys: sc.Keys}
		h, r := engine(sc.Holder, 0), engine(sc.Retrier, skew)
		for k := range sc.Keys {
			wg.Go(func() {
				call := idem.Call{Scope: "test", Key: fmt.Sprintf("skew-%d-%v-%d", newToken(), skew, k), Fingerprint: "fp"}
				key := runSkewKey(h, r, call)
				mu.Lock()
				defer mu.Unlock()
				sc.judge(t, skew, k, key, got[skew])
			})
		}
	}
	wg.Wait()
	return got
}

// judge counts key into c, and reports it as a test error if it ran
// twice while its holder kept its lease, or ended in an error.
func (sc SkewScenario) judge(t *testing.T, skew float64, k int, key SkewKey, c *SkewCounts) {
	c.Conflicts += key.Conflicts
	if key.Err != nil {
		t.Errorf("retrier %+v leases off, key %d: %v", skew, k, key.Err)
	}
	switch {
	case key.Overlaps > 0:
		c.Twice++
		t.Errorf("retrier %+v leases off, key %d: a second run started while an earlier one was live (%d runs)", skew, k, key.Runs)
	case key.GaveUp:
		c.GaveUp++
		if key.Runs > 1 {
			c.Reran++
		}
	case key.Runs != 1:
		c.Twice++
		t.Errorf("retrier %+v leases off, key %d: the work ran %d times", skew, k, key.Runs)
	case key.Err == nil && sc.WantInProgress && (!key.Replayed || key.Conflicts == 0):
		t.Errorf("retrier %+v leases off, key %d: %d retries saw the key in progress, replayed at the end: %v", skew, k, key.Conflicts, key.Replayed)
	}
}

// runSkewKey runs one key: h holds it, r retries it every quarter lease
// until r replays its outcome after h returned, runs it itself, or a run
// gives its lease up.
func runSkewKey(h, r *idem.Engine, call idem.Call) SkewKey {
	var (
		key     SkewKey
		runs    atomic.Int32
		tracker SkewTracker
	)
	started := make(chan struct{})
	work := tracker.Work(&runs, started)
	held := make(chan error, 1)
	go func() { _, err := h.Do(context.Background(), call, work); held <- err }()
	<-started
	holding := true
	for try := 1; ; try++ {
		if holding {
			select {
			case err := <-held:
				holding = false
				key.holderEnded(err)
			case <-time.After(SkewLease / 4):
			}
		} else {
			time.Sleep(SkewLease / 4)
		}
		if key.GaveUp || key.Err != nil || !key.retry(r, call, work, holding, try) {
			break
		}
	}
	if holding {
		key.holderEnded(<-held)
	}
	key.Runs, key.Overlaps = runs.Load(), tracker.Overlaps()
	return key
}

// holderEnded reads the holder's result.
func (key *SkewKey) holderEnded(err error) {
	switch {
	case errors.Is(err, idem.ErrLeaseLost):
		// Its renewals did not get through in time (a loaded machine) and
		// it gave its lease up by its own count, as it must: the key may
		// run again, after its context ended.
		key.GaveUp = true
	case err != nil:
		key.Err = fmt.Errorf("holder: %w", err)
	}
}

// retry retries the key once, the try-th time, and reports whether to
// retry again.
func (key *SkewKey) retry(r *idem.Engine, call idem.Call, work idem.Func, holding bool, try int) bool {
	res, err := r.Do(context.Background(), call, work)
	switch {
	case errors.Is(err, idem.ErrInProgress):
		key.Conflicts++
		if try < skewTries {
			return true
		}
		key.Err = fmt.Errorf("retry: still in progress after %d retries: %w", try, err)
	case errors.Is(err, idem.ErrLeaseLost):
		key.GaveUp = true // the retrier ran the work itself, and gave up
	case err != nil:
		key.Err = fmt.Errorf("retry: %w", err)
	case !res.Replayed:
		// The retrier ran the work itself: a second run, which Runs counts.
	case string(res.Value) != "done":
		key.Err = fmt.Errorf("retry: replayed %q, want done", res.Value)
	default:
		key.Replayed = true
		return holding // replayed before the holder returned: wait for it
	}
	return false
}

// TakeOverDead retries a dead holder's key on r every quarter lease until
// it takes it over, and returns an error if a try that began a whole lease
// after the end of the first look (TakeoverOverdue) still found it in
// progress, if a try did not take it over, or if it was still in progress
// after skewTries tries.
func TakeOverDead(r *idem.Engine, call idem.Call) error {
	var firstLook time.Time
	for tries := 1; ; tries++ {
		try := time.Now()
		res, err := r.Do(context.Background(), call, func(context.Context) ([]byte, error) { return []byte("taken"), nil })
		if firstLook.IsZero() {
			firstLook = time.Now()
		}
		switch {
		case errors.Is(err, idem.ErrInProgress) && TakeoverOverdue(firstLook, try):
			return fmt.Errorf("still in progress on a try %v after the first look ended, more than a lease",
				try.Sub(firstLook).Round(time.Millisecond))
		case errors.Is(err, idem.ErrInProgress) && tries < skewTries:
			time.Sleep(SkewLease / 4)
		case err != nil || !res.TookOver:
			return fmt.Errorf("%+v %v after %d tries, want a takeover", res, err, tries)
		default:
			return nil
		}
	}
}
