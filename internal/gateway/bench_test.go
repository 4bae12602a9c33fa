package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/gateway"
	"github.com/idem-dev/idem/internal/gateway/config"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store/memory"
)

// BenchmarkGateway measures the gateway as `idem serve` builds it by
// default, on the memory store, in front of an upstream over loopback TCP,
// against a plain httputil.ReverseProxy to the same upstream: the floor
// any gateway pays. Client, gateway and upstream share the process, so
// allocs/op and B/op count all three, and their differences between the
// sub-benchmarks are the gateway's own. ns/op is a poor guide here: with
// three parties in one process it moves with the scheduler (the proxy's
// measured 66-192 µs in one hour); the load harness's duels measure time.
// A first call has a new key every request; a replay retries one of 1024
// keys answered before the timer.
func BenchmarkGateway(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1","amount":1000,"currency":"eur","status":"succeeded"}`)
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)

	plain := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = r.In.Host },
		Transport: gateway.NewTransport(time.Minute),
	}
	b.Run("proxy", func(b *testing.B) { benchFront(b, plain, func(int64) string { return "" }) })

	newGateway := func(b *testing.B) http.Handler {
		cfg := &config.Config{Upstream: upstream.URL, Store: "memory:"}

		cfg.WithDefaults()
		built, err := cfg.Build()
		if err != nil {
			b.Fatal(err)
		}
		// A steady state, as in BenchmarkMiddleware: records expire and
		// are cleaned up, so the store does not grow with b.N.
		built.Policy.TTL, built.Policy.Lease, built.Policy.CleanupInterval = time.Second, time.Second, 100*time.Millisecond
		lg := slog.New(slog.DiscardHandler)
		eng := idem.New(memory.New(), built.Policy, idem.WithLogger(lg))
		b.Cleanup(func() { eng.Close() })
		built.Options.Logger = lg

		p, err := gateway.New(gateway.Options{Upstream: u, Engine: eng, Middleware: built.Options, Logger: lg})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	b.Run("first", func(b *testing.B) {
		benchFront(b, newGateway(b), func(i int64) string { return "first-" + strconv.FormatInt(i, 10) })
	})
	b.Run("replay", func(b *testing.B) {
		gw := newGateway(b)
		key := func(i int64) string { return "replay-" + strconv.FormatInt(i%1024, 10) }
		front := httptest.NewServer(gw)
		defer front.Close()
		for i := range int64(1024) {
			send(b, http.DefaultClient, front.URL, key(i))
		}
		benchServer(b, front, key)
	})
}

// benchFront serves h over loopback TCP and sends it POSTs from parallel
// clients, each with the key key(n) when not empty.
func benchFront(b *testing.B, h http.Handler, key func(int64) string) {
	front := httptest.NewServer(h)
	defer front.Close()
	benchServer(b, front, key)
}

func benchServer(b *testing.B, front *httptest.Server, key func(int64) string) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var seq atomic.Int64
	b.ReportAllocs()
	// Enough clients in flight to keep both cores busy, as the load
	// harness's 64 connections do: ns/op then tracks CPU, not latency.
	b.SetParallelism(16)
	b.ResetTimer()
	cpu0 := testkit.ProcessCPU()
	defer func() { b.ReportMetric(float64(testkit.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			send(b, client, front.URL, key(seq.Add(1)))
		}
	})
}

func send(b *testing.B, client *http.Client, base, key string) {
	req, _ := http.NewRequest("POST", base+"/charges", strings.NewReader(`{"amount":1000,"currency":"eur","customer":"cus_123"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_bench")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		b.Fatalf("status %d", res.StatusCode)
	}
}
