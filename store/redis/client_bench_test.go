package redisstore

// Which Redis client the store should use is decided here, by measurement:
// the store's two scripts (reserve, complete) sent by SHA with prebuilt
// arguments through go-redis (a connection per concurrent caller, one write
// and one read syscall per command) and through rueidis (one connection
// whose writes and reads are pipelined automatically across callers), side
// by side, in alternating chunks so that both meet the same machine.

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

func BenchmarkClients(b *testing.B) {
	u, err := url.Parse(testenv.Redis(b))
	if err != nil {
		b.Fatal(err)
	}
	opt, err := redis.ParseURL(u.String())
	if err != nil {
		b.Fatal(err)
	}
	opt.PoolSize = 64
	opt.ContextTimeoutEnabled = true
	gr := redis.NewClient(opt)
	defer gr.Close()
	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{u.Host}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer ru.Close()
	ctx := context.Background()
	for _, sc := range []*redis.Script{reserveScript.goredis, completeScript.goredis} {
		if err := sc.Load(ctx, gr).Err(); err != nil {
			b.Fatal(err)
		}
	}
	prefix := "idembench:clients:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	defer dropBench(gr, prefix)

	leaseS := strconv.FormatInt(micros(time.Minute), 10)
	ttlS := strconv.FormatInt(millis(benchLife), 10)
	value := `{"id":"ch_1N4Xs2LkdIwHu7ixAbCdEfGh","status":"succeeded","amount":2000}`
	reserveArgs := []string{"1", leaseS, ttlS, "42",
		"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "POST /v1/charges",
		"bench", "kraw", "req_raw", "", ""}
	completeArgs := []string{"42", "succeeded", value, ttlS}
	reserveAny := make([]any, len(reserveArgs))
	for i, a := range reserveArgs {
		reserveAny[i] = a
	}
	completeAny := make([]any, len(completeArgs))
	for i, a := range completeArgs {
		completeAny[i] = a
	}
	key := func(client string, i uint64) string {
		return prefix + client + "{" + strconv.FormatUint(i, 10) + "}"
	}
	goredis := func(i uint64) error {
		keys := []string{key("g", i)}
		if err := gr.EvalSha(ctx, reserveScript.Hash(), keys, reserveAny...).Err(); err != nil {
			return err
		}
		return gr.EvalSha(ctx, completeScript.Hash(), keys, completeAny...).Err()
	}
	rue := func(i uint64) error {
		k := key("r", i)
		if err := ru.Do(ctx, ru.B().Evalsha().Sha1(reserveScript.Hash()).Numkeys(1).Key(k).Arg(reserveArgs...).Build()).Error(); err != nil {
			return err
		}
		return ru.Do(ctx, ru.B().Evalsha().Sha1(completeScript.Hash()).Numkeys(1).Key(k).Arg(completeArgs...).Build()).Error()
	}
	for _, conc := range []int{1, 16, 64} {
		b.Run("c"+strconv.Itoa(conc), func(b *testing.B) {
			chunk := max(64, 8*conc)
			var gTime, rTime time.Duration
			var gCPU, rCPU int64
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				c0, t0 := cpuTime(), time.Now()
				runPairs(n, conc, goredis, b)
				c1, t1 := cpuTime(), time.Now()
				runPairs(n, conc, rue, b)
				gTime += t1.Sub(t0)
				rTime += time.Since(t1)
				gCPU += c1 - c0
				rCPU += cpuTime() - c1
			}
			b.ReportMetric(float64(b.N)/gTime.Seconds(), "goredis-pairs/s")
			b.ReportMetric(float64(b.N)/rTime.Seconds(), "rueidis-pairs/s")
			b.ReportMetric(float64(gCPU)/float64(b.N)/1000, "goredis-cpu-µs/pair")
			b.ReportMetric(float64(rCPU)/float64(b.N)/1000, "rueidis-cpu-µs/pair")
		})
	}
}
