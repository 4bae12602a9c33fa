package redisstore

// The benchmark is an internal test so that its raw baseline can send the
// store's own scripts by SHA, with arguments built once, next to the store.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store/storetest"
)

// benchLife is the records' lifetime: short, so that the keys a benchmark
// creates expire soon on the shared server.
const benchLife = 5 * time.Second

// BenchmarkPairs measures Reserve+Complete pairs on fresh keys at several
// concurrencies, each next to raw go-redis loops that send the same Redis
// commands without the store's Go code (see benchSetup). Besides pairs/s it
// reports the process's CPU time per pair, which a busy machine disturbs
// less than wall time.
func BenchmarkPairs(b *testing.B) {
	v := benchSetup(b)
	for _, conc := range []int{1, 16, 64} {
		pairs := []namedPair{{"store", v.store}, {"raw-evalsha", v.rawEvalsha}, {"raw-setnx", v.rawSetNX}}
		if conc == 16 {
			pairs = append(pairs, namedPair{"store-watchdog", v.storeWatchdog})
		}
		for _, p := range pairs {
			b.Run("c"+strconv.Itoa(conc)+"/"+p.name, func(b *testing.B) {
				b.ReportAllocs()
				start := cpuTime()
				b.ResetTimer()
				runPairs(b.N, conc, p.pair, b)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
				b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/pair")
			})
		}
	}
}

// BenchmarkPairsInterleaved runs the store and the raw EVALSHA loop in
// alternating chunks of the same size, so that both meet the same noise
// from a busy machine, and reports their rates and the store's share.
func BenchmarkPairsInterleaved(b *testing.B) {
	v := benchSetup(b)
	for _, conc := range []int{1, 16, 64} {
		b.Run("c"+strconv.Itoa(conc), func(b *testing.B) {
			chunk := max(64, 8*conc)
			var storeTime, rawTime time.Duration
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				t0 := time.Now()
				runPairs(n, conc, v.store, b)
				t1 := time.Now()
				runPairs(n, conc, v.rawEvalsha, b)
				storeTime += t1.Sub(t0)
				rawTime += time.Since(t1)
			}
			storeRate := float64(b.N) / storeTime.Seconds()
			rawRate := float64(b.N) / rawTime.Seconds()
			b.ReportMetric(storeRate, "store-pairs/s")
			b.ReportMetric(rawRate, "raw-pairs/s")
			b.ReportMetric(storeRate/rawRate, "store/raw")
		})
	}
}

type namedPair struct {
	name string
	pair func(uint64) error
}

type benchVariants struct {
	store, storeWatchdog, rawEvalsha, rawSetNX func(uint64) error
}

// benchSetup connects, loads the scripts and builds the variants:
//
//	store           the Store
//	store-watchdog  the Store on a go-redis default client (deadlines not
//	                honoured) with a context with a deadline, so that every
//	                call runs in a watched goroutine
//	raw-evalsha     the same two EVALSHA calls, arguments built beforehand
//	raw-setnx       SET NX PX + SET XX PX, the floor for any two-step store
func benchSetup(b *testing.B) benchVariants {
	opt, err := redis.ParseURL(testenv.Redis(b))
	if err != nil {
		b.Fatal(err)
	}
	opt.PoolSize = 64 // one connection per caller at c64, for all variants
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	b.Cleanup(func() { _ = client.Close() })
	dopt := *opt
	dopt.ContextTimeoutEnabled = false
	defaultClient := redis.NewClient(&dopt)
	b.Cleanup(func() { _ = defaultClient.Close() })

	ctx := context.Background()
	for _, sc := range []*redis.Script{reserveScript.goredis, completeScript.goredis} {
		if err := sc.Load(ctx, client).Err(); err != nil {
			b.Fatal(err)
		}
	}
	rb := make([]byte, 4)
	_, _ = rand.Read(rb)
	prefix := "idembench:" + hex.EncodeToString(rb) + ":"
	b.Cleanup(func() { dropBench(client, prefix) })

	value := []byte(`{"id":"ch_1N4Xs2LkdIwHu7ixAbCdEfGh","status":"succeeded","amount":2000}`)

	storePair := func(s *Store, withDeadline bool) func(i uint64) error {
		return func(i uint64) error {
			ctx := context.Background()
			if withDeadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
			}
			return storetest.FreshPair(ctx, s, i, "POST /v1/charges", value, benchLife)
		}
	}

	// The raw loop's arguments are built once; only the key name changes.
	leaseS := strconv.FormatInt(micros(time.Minute), 10)
	ttlS := strconv.FormatInt(millis(benchLife), 10)
	reserveArgs := []any{"1", leaseS, ttlS, "42",
		"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "POST /v1/charges",
		"bench", "kraw", "req_raw", "", ""}
	completeArgs := []any{"42", "succeeded", value, ttlS}
	rawKey := func(i uint64) string {
		return prefix + "raw{" + strconv.FormatUint(i, 10) + "}"
	}

	s, err := New(client, Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	sw, err := New(defaultClient, Options{Prefix: prefix + "w:"})
	if err != nil {
		b.Fatal(err)
	}
	return benchVariants{
		store:         storePair(s, false),
		storeWatchdog: storePair(sw, true),
		rawEvalsha: func(i uint64) error {
			keys := []string{rawKey(i)}
			if err := client.EvalSha(ctx, reserveScript.Hash(), keys, reserveArgs...).Err(); err != nil {
				return err
			}
			return client.EvalSha(ctx, completeScript.Hash(), keys, completeArgs...).Err()
		},
		rawSetNX: func(i uint64) error {
			key := rawKey(i)
			if err := client.SetNX(ctx, key, "in_progress", benchLife).Err(); err != nil {
				return err
			}
			return client.SetXX(ctx, key, value, benchLife).Err()
		},
	}
}

// benchSeq numbers the pairs: every pair works on a fresh key.
var benchSeq atomic.Uint64

// runPairs runs n pairs, each on a fresh key, over conc goroutines.
func runPairs(n, conc int, pair func(uint64) error, b *testing.B) {
	if _, err := storetest.RunConcurrent(n, conc, func(uint64) error { return pair(benchSeq.Add(1)) }); err != nil {
		b.Error(err)
	}
}

// cpuTime is the process's CPU time in ns.
func cpuTime() int64 { return int64(testkit.ProcessCPU()) }

func dropBench(c *redis.Client, prefix string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			c.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		c.Unlink(ctx, batch...)
	}
}
