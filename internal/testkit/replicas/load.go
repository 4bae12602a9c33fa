package replicas

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
)

// LoadOptions shape Load.
type LoadOptions struct {
	// Keys is how many keys the clients run; Workers how many clients run
	// them at once.
	Keys, Workers int
	// Failovers is how many times Load calls failover, spread over the
	// keys.
	Failovers int
	// Work is how long each execution takes.
	Work time.Duration
	// Attempts bounds the calls a client makes for one key before it
	// gives up on it (every 10 ms).
	Attempts int
}

// Report is what Load saw, per key.
type Report struct {
	Keys int
	// Executions counts the runs of the operation, over every key.
	Executions int
	// RanTwice are the keys whose operation ran more than once.
	RanTwice []string
	// Changed are the keys a client was answered one outcome for, and a
	// later call another.
	Changed []string
	// Unanswered are the keys that got no outcome within
	// LoadOptions.Attempts calls.
	Unanswered []string
	// Errors counts the calls that returned an error (a store outage, a
	// key held by a running call), which the clients retried.
	Errors int
	// LeaseLost counts the calls that ran their key and were answered
	// that its outcome was not recorded because the key was no longer
	// theirs (ErrLeaseLost): a takeover, or a record the store lost.
	LeaseLost int
}

func (r Report) String() string {
	return fmt.Sprintf("%d keys, %d executions, %d ran twice %v, %d outcomes changed %v, %d unanswered, %d errors retried, %d runs not recorded for a lost lease",
		r.Keys, r.Executions, len(r.RanTwice), r.RanTwice, len(r.Changed), r.Changed, len(r.Unanswered), r.Errors, r.LeaseLost)
}

// Load runs clients that retry keys through eng as a client of idem does
// (every error retried), while failover is called Failovers times, each
// after another share of the keys has been answered. Each key's operation
// counts its runs and answers its key and run number, so that an
// acknowledged outcome changed later shows. Every key answered during the
// failovers is asked again at the end.
func Load(t testing.TB, eng *idem.Engine, failover func(i int), o LoadOptions) Report {
	t.Helper()
	if o.Attempts <= 0 {
		o.Attempts = 3000
	}
	var (
		mu       sync.Mutex
		runs     = map[string]int{}
		acked    = map[string]string{}
		changed  = map[string]bool{}
		unanswer []string
		errs     atomic.Int64
		lostRuns atomic.Int64
		next     atomic.Int64
		answered atomic.Int64
	)
	keyOf := func(i int) string { return fmt.Sprintf("key-%04d", i) }
	fn := func(key string) idem.Func {
		return func(ctx context.Context) ([]byte, error) {
			mu.Lock()
			runs[key]++
			n := runs[key]
			mu.Unlock()
			if o.Work > 0 {
				time.Sleep(o.Work)
			}
			return fmt.Appendf(nil, "%s run %d", key, n), nil
		}
	}
	// ask calls key until it is answered, and checks the answer against
	// the first one acknowledged.
	ask := func(key string) bool {
		for range o.Attempts {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := eng.Do(ctx, idem.Call{Scope: "failover", Key: key, Fingerprint: "fp"}, fn(key))
			cancel()
			if err != nil {
				errs.Add(1)
				if res.NotRecorded && errors.Is(err, idem.ErrLeaseLost) {
					lostRuns.Add(1)
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			mu.Lock()
			if first, ok := acked[key]; !ok {
				acked[key] = string(res.Value)
			} else if first != string(res.Value) && !changed[key] {
				changed[key] = true
				t.Logf("key %s: answered %q, now %q", key, first, res.Value)
			}
			mu.Unlock()
			return true
		}
		mu.Lock()
		unanswer = append(unanswer, key)
		mu.Unlock()
		return false
	}
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= o.Keys {
					return
				}
				ask(keyOf(i))
				answered.Add(1)
				// A retry of an earlier key, as a client whose answer was
				// lost makes, so that outcomes are read across failovers.
				if i > 0 {
					ask(keyOf(rand.IntN(i)))
				}
			}
		})
	}
	for f := range o.Failovers {
		for answered.Load() < int64(o.Keys*(f+1)/(o.Failovers+1)) && next.Load() < int64(o.Keys) {
			time.Sleep(5 * time.Millisecond)
		}
		failover(f)
	}
	wg.Wait()
	for i := range o.Keys {
		ask(keyOf(i))
	}
	r := Report{Keys: o.Keys, Errors: int(errs.Load()), Unanswered: unanswer, LeaseLost: int(lostRuns.Load())}
	for key, n := range runs {
		r.Executions += n
		if n > 1 {
			r.RanTwice = append(r.RanTwice, key)
		}
	}
	for key := range changed {
		r.Changed = append(r.Changed, key)
	}
	slices.Sort(r.RanTwice)
	slices.Sort(r.Changed)
	return r
}
