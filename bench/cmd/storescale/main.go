// Command storescale measures one of idem's stores at scale: the memory a
// live key costs and how long a restart takes. The harness (the footprint
// stage of cmd/bench) and bench/filescale.sh (make scale-file) run it.
//
//	storescale -store file:/tmp/fs -keys 1000000 fill    # write the keys, report bytes per key
//	storescale -store file:/tmp/fs -keys 1000000 open    # reopen, report restart time and memory
//	storescale -store file:/tmp/fs -from 1000000 -keys 100000 crash  # write more keys, exit without Close
//	storescale -store file:/tmp/fs -from 1000000 -keys 100000 -hold crash  # ... then wait for a kill -9
//
// -store is an idem store DSN (file:, pebble:, redis://, postgres://).
// fill writes -keys durable reserve+complete pairs (the gateway's records:
// a SHA-256 fingerprint, a route, a 130-byte stored response, a TTL of a
// day) from -c goroutines, then reports the process's resident memory
// growth after a garbage collection, divided by the keys: an embedded
// store's memory per key (a server store's memory is the server's, which
// the harness reads itself). crash writes keys from -from on and exits
// without closing the store; with -hold it prints "held" and waits, so
// that the harness kills it with SIGKILL while the store is open. open
// times opening the store, in a fresh process, and reads a sample of the
// keys back.
//
// Each command ends with one line "result: {JSON}" (see Result) that the
// harness parses.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/store"
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

// Result is what one command measured; the harness reads it from the
// "result: " line.
type Result struct {
	Op      string  `json:"op"` // fill, crash, open
	Keys    int     `json:"keys"`
	Seconds float64 `json:"seconds"` // writing (fill, crash) or opening (open)
	// RSSPerKey and HeapPerKey: the process's resident memory and Go heap
	// growth over the command, per key of -keys.
	RSSPerKey  float64 `json:"rss_bytes_per_key"`
	HeapPerKey float64 `json:"heap_bytes_per_key,omitempty"`
	// CloseSeconds: Close at the end (fill, open).
	CloseSeconds float64 `json:"close_seconds,omitempty"`
	// GetMicros: a Get of a stored response after open, mean.
	GetMicros float64 `json:"get_us,omitempty"`
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
	storeDSN := flag.String("store", "", "the store's DSN (file:DIR, pebble:DIR, redis://..., postgres://...)")
	dir := flag.String("dir", "", "shorthand for -store file:DIR")
	keys := flag.Int("keys", 1_000_000, "live keys to write (fill, crash), or written (open)")
	conc := flag.Int("c", 64, "concurrent writers (fill, crash)")
	sample := flag.Int("sample", 10000, "keys read back after open")
	from := flag.Int("from", 0, "the first key's number (crash)")
	hold := flag.Bool("hold", false, "crash: wait for a kill instead of exiting")
	cpuProfile := flag.String("cpuprofile", "", "open: write a CPU profile of the open to this file")
	midSnapshot := flag.Bool("kill-mid-snapshot", false, "crash, file store (-dir): SIGKILL this process once a background index snapshot is half written, the worst moment for the next restart (exits 1 if none starts within -keys)")
	flag.Parse()
	if *storeDSN == "" && *dir != "" {
		*storeDSN = "file:" + *dir
	}
	if *storeDSN == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: storescale -store DSN [-keys N] fill|crash|open")
		os.Exit(2)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	openStore := func() *dsn.Opened {
		s, err := dsn.Open(ctx, *storeDSN, dsn.Options{Logger: quiet, Migrate: true, ConnectTimeout: time.Minute})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return s
	}
	var res Result
	switch op := flag.Arg(0); op {
	case "fill", "crash":
		rss0, heap0 := rss(), heap()
		s := openStore()
		if op == "crash" && *midSnapshot {
			go killMidSnapshot(*dir)
		}
		took := fill(ctx, s, *from, *keys, *conc)
		if *midSnapshot {
			fmt.Fprintf(os.Stderr, "crash: %d keys written and no snapshot started\n", *keys)
			os.Exit(1)
		}
		res = Result{Op: op, Keys: *keys, Seconds: took.Seconds()}
		if op == "crash" {
			fmt.Printf("crash: %d keys from %d in %.1f s; exiting without Close\n", *keys, *from, took.Seconds())
			if *hold {
				fmt.Println("held")
				select {}
			}
			os.Exit(0)
		}
		rss1, heap1 := rss(), heap()
		res.RSSPerKey = float64(rss1-rss0) / float64(*keys)
		res.HeapPerKey = float64(int64(heap1)-int64(heap0)) / float64(*keys)
		fmt.Printf("fill: %d keys in %.1f s (%.0f pairs/s, c%d)\n", *keys, took.Seconds(), float64(*keys)/took.Seconds(), *conc)
		fmt.Printf("fill: RSS %d -> %d MiB: %.1f bytes per live key; Go heap %.1f bytes per live key\n",
			rss0>>20, rss1>>20, res.RSSPerKey, res.HeapPerKey)
		start := time.Now()
		if err := s.Close(); err != nil {
			panic(err)
		}
		res.CloseSeconds = time.Since(start).Seconds()
		fmt.Printf("fill: Close took %.2f s\n", res.CloseSeconds)
	case "open":
		rss0 := rss()
		stopProfile := profileCPU(*cpuProfile)
		start := time.Now()
		s := openStore()
		took := time.Since(start)
		stopProfile()
		rss1 := rss()
		n := min(*sample, *keys)
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
		res = Result{Op: op, Keys: *keys, Seconds: took.Seconds(), RSSPerKey: float64(rss1-rss0) / float64(*keys)}
		if n > 0 {
			res.GetMicros = float64(get.Microseconds()) / float64(n)
		}
		fmt.Printf("open: restart took %.2f s; RSS %d -> %d MiB (%.1f bytes per key of -keys %d)\n",
			took.Seconds(), rss0>>20, rss1>>20, res.RSSPerKey, *keys)
		fmt.Printf("open: %d Gets of stored responses: %.2f µs each\n", n, res.GetMicros)
		start = time.Now()
		if err := s.Close(); err != nil {
			panic(err)
		}
		res.CloseSeconds = time.Since(start).Seconds()
		fmt.Printf("open: Close took %.2f s\n", res.CloseSeconds)
	default:
		fmt.Fprintln(os.Stderr, "usage: storescale -store DSN [-keys N] fill|crash|open")
		os.Exit(2)
	}
	b, _ := json.Marshal(res)
	fmt.Printf("result: %s\n", b)
}

// killMidSnapshot kills this process with SIGKILL once the file store in
// dir is half through writing a new index snapshot (its temporary file as
// large as half the last one): the next restart then reads the older
// snapshot and all the log written since, the most a kill can leave it.
func killMidSnapshot(dir string) {
	last, err := os.Stat(filepath.Join(dir, "index.snap"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kill-mid-snapshot: no snapshot to start from:", err)
		os.Exit(1)
	}
	for {
		time.Sleep(time.Millisecond)
		if fi, err := os.Stat(filepath.Join(dir, "index.snap.tmp")); err == nil && fi.Size() >= last.Size()/2 {
			fmt.Printf("crash: killed with the snapshot %d of %d bytes written\n", fi.Size(), last.Size())
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}

// profileCPU starts a CPU profile into path, unless path is empty, and
// returns what stops it.
func profileCPU(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// fill writes the pairs from..from+n-1 from conc goroutines.
func fill(ctx context.Context, s store.Store, from, n, conc int) time.Duration {
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				req := request(i + from)
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
	return time.Since(start)
}
