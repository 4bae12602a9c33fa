package storetest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
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
			RunRate(b, conc, "executions/s", func(uint64) error {
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
			RunRate(b, conc, "replays/s", func(uint64) error {
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

// RunConcurrent calls fn(i) for i = 1..n from conc goroutines, and returns
// how long that took and the first error; a goroutine stops at its first
// error. Store benchmarks use it to drive a store and its raw floor alike.
func RunConcurrent(n, conc int, fn func(i uint64) error) (time.Duration, error) {
	var (
		next   atomic.Uint64
		wg     sync.WaitGroup
		failed atomic.Pointer[error]
	)
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= uint64(n); i = next.Add(1) {
				if err := fn(i); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		return elapsed, *err
	}
	return elapsed, nil
}

// RunRate runs fn b.N times from conc goroutines as the timed part of a
// benchmark and reports the rate as unit (executions/s, pairs/s) and the
// process's CPU time per call (cpu-µs/op): on a machine whose cores the
// gateway shares with its upstream, CPU per call, more than latency, is
// what a store costs.
func RunRate(b *testing.B, conc int, unit string, fn func(i uint64) error) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := testkit.ProcessCPU()
	elapsed, err := RunConcurrent(b.N, conc, fn)
	cpu := testkit.ProcessCPU() - cpu0
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// FreshPair reserves key "k<i>" in scope "bench", which must be fresh, for
// binding, and completes it with value, both for ttl: one pair of a
// backend benchmark.
func FreshPair(ctx context.Context, s store.Store, i uint64, binding string, value []byte, ttl time.Duration) error {
	key := "k" + strconv.FormatUint(i, 10)
	r := store.Record{
		KeyHash: store.HashKey("bench", key), Scope: "bench", Key: key,
		Fingerprint: "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		Binding:     binding, State: store.InProgress, Token: i, RequestID: "req_" + key,
	}
	res, err := s.Reserve(ctx, store.ReserveRequest{Record: r, Lease: time.Minute, TTL: ttl, TakeOverStale: true})
	if err != nil {
		return err
	}
	if !res.Acquired {
		return fmt.Errorf("fresh key %s not acquired", key)
	}
	return s.Complete(ctx, store.Completion{
		Fence: store.Fence{KeyHash: r.KeyHash, Scope: r.Scope, Token: i},
		State: store.Succeeded, Value: value, TTL: ttl,
	})
}
