// Command filescale measures the embedded file store (store/file) at scale:
// the memory its index takes per live key and how long a restart takes.
//
//	filescale -dir /tmp/fs -keys 1000000 fill   # write the keys, report bytes per key
//	filescale -dir /tmp/fs open                 # reopen, report restart time and memory
//	filescale -dir /tmp/fs -from 1000000 -keys 100000 crash  # write more keys, exit without Close
//
// fill writes -keys durable reserve+complete pairs (the gateway's records:
// a SHA-256 fingerprint, a route, a 130-byte stored response, a TTL of a
// day) from 64 goroutines, then reports the process's resident memory
// growth after a garbage collection, divided by the keys; crash writes
// keys from -from on and exits without closing the store, as a kill
// would (every write it made was acknowledged, so on disk). open times
// file.Open on the directory, in a fresh process, and reads a sample of
// the keys back.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/file"
)

var value = []byte(`{"status":201,"headers":{"Content-Type":["application/json"]},"body":"eyJpZCI6ImNoXzEyMyIsImFtb3VudCI6MTAwMH0="}`)

func request(i int) store.ReserveRequest {
	key := fmt.Sprintf("scale-%d", i)
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("tenant-1", key), Scope: "tenant-1", Key: key,
			Fingerprint: "sha256:" + strings.Repeat("ab", 32), Binding: "POST /v1/charges",
			State: store.InProgress, Token: uint64(i) + 1, RequestID: "req-" + key,
		},
		Lease: time.Minute, TTL: 24 * time.Hour,
	}
}

// rss returns the resident memory after a full collection that returns
// freed pages to the system.
func rss() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		panic(err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func heap() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func main() {
	dir := flag.String("dir", "", "the store's directory")
	keys := flag.Int("keys", 1_000_000, "live keys to write (fill)")
	conc := flag.Int("c", 64, "concurrent writers (fill)")
	sample := flag.Int("sample", 10000, "keys read back after open")
	from := flag.Int("from", 0, "the first key's number (crash)")
	flag.Parse()
	if *dir == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: filescale -dir DIR [-keys N] fill|open")
		os.Exit(2)
	}
	opts := file.Options{Logger: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	switch flag.Arg(0) {
	case "fill", "crash":
		rss0, heap0 := rss(), heap()
		s, err := file.Open(*dir, opts)
		if err != nil {
			panic(err)
		}
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range *conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= *keys {
						return
					}
					i += *from
					req := request(i)
					if _, err := s.Reserve(ctx, req); err != nil {
						panic(err)
					}
					if err := s.Complete(ctx, store.Completion{
						Fence: store.Fence{KeyHash: req.Record.KeyHash, Scope: req.Record.Scope, Token: req.Record.Token},
						State: store.Succeeded, Value: value, TTL: 24 * time.Hour,
					}); err != nil {
						panic(err)
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		if flag.Arg(0) == "crash" {
			fmt.Printf("crash: %d keys from %d in %.1f s; exiting without Close\n", *keys, *from, took.Seconds())
			os.Exit(0)
		}
		rss1, heap1 := rss(), heap()
		fmt.Printf("fill: %d keys in %.1f s (%.0f pairs/s, c%d)\n", *keys, took.Seconds(), float64(*keys)/took.Seconds(), *conc)
		fmt.Printf("fill: RSS %d -> %d MiB: %.1f bytes per live key; Go heap %.1f bytes per live key\n",
			rss0>>20, rss1>>20, float64(rss1-rss0)/float64(*keys), float64(int64(heap1)-int64(heap0))/float64(*keys))
		start = time.Now()
		if err := s.Close(); err != nil {
			panic(err)
		}
		fmt.Printf("fill: Close took %.2f s\n", time.Since(start).Seconds())
	case "open":
		rss0 := rss()
		start := time.Now()
		s, err := file.Open(*dir, opts)
		if err != nil {
			panic(err)
		}
		took := time.Since(start)
		rss1 := rss()
		n := *sample
		t := time.Now()
		for i := range n {
			req := request(i * 7919 % max(*keys, 1))
			r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
			if err != nil || r.State != store.Succeeded || string(r.Value) != string(value) {
				fmt.Printf("open: key %d: %v %v\n", i, r.State, err)
				os.Exit(1)
			}
		}
		get := time.Since(t)
		fmt.Printf("open: restart took %.2f s; RSS %d -> %d MiB (%.1f bytes per key of -keys %d)\n",
			took.Seconds(), rss0>>20, rss1>>20, float64(rss1-rss0)/float64(*keys), *keys)
		fmt.Printf("open: %d Gets of stored responses (pread of the frame): %.2f µs each\n", n, float64(get.Microseconds())/float64(n))
		start = time.Now()
		if err := s.Close(); err != nil {
			panic(err)
		}
		fmt.Printf("open: Close took %.2f s\n", time.Since(start).Seconds())
	default:
		fmt.Fprintln(os.Stderr, "usage: filescale -dir DIR [-keys N] fill|open")
		os.Exit(2)
	}
}
