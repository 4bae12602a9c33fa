package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
)

// Bench benchmarks idem's engine on a store: a first execution (every call a
// new key, so a reserve and a complete) and a replay (every call a known
// key), each at concurrency 1 and 64. It reports executions/s (or
// replays/s) next to ns/op.
func Bench(b *testing.B, newStore func(b *testing.B) store.Store) {
	value := make([]byte, 256)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	op := func(ctx context.Context) ([]byte, error) { return value, nil }
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("first/c%d", conc), func(b *testing.B) {
			s := newStore(b)
			defer s.Close()
			eng := idem.New(s, idem.Policy{CleanupInterval: -1})
			defer eng.Close()
			var seq atomic.Int64
			run(b, conc, "executions/s", func() error {
				key := fmt.Sprintf("first-%d", seq.Add(1))
				_, err := eng.Do(context.Background(), idem.Call{Scope: "bench", Key: key, Fingerprint: "fp"}, op)
				return err
			})
		})
		b.Run(fmt.Sprintf("replay/c%d", conc), func(b *testing.B) {
			s := newStore(b)
			defer s.Close()
			eng := idem.New(s, idem.Policy{CleanupInterval: -1})
			defer eng.Close()
			const keys = 1024
			for i := range keys {
				if _, err := eng.Do(context.Background(), idem.Call{Scope: "bench", Key: fmt.Sprint("replay-", i), Fingerprint: "fp"}, op); err != nil {
					b.Fatal(err)
				}
			}
			var seq atomic.Int64
			run(b, conc, "replays/s", func() error {
				key := fmt.Sprint("replay-", seq.Add(1)%keys)
				res, err := eng.Do(context.Background(), idem.Call{Scope: "bench", Key: key, Fingerprint: "fp"}, op)
				if err == nil && !res.Replayed {
					err = fmt.Errorf("key %s was not replayed", key)
				}
				return err
			})
		})
	}
}

// run calls fn b.N times from conc goroutines and reports the rate as unit.
func run(b *testing.B, conc int, unit string, fn func() error) {
	b.ReportAllocs()
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Value
	)
	b.ResetTimer()
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := fn(); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
}
