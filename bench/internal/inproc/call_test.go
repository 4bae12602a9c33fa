package inproc

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/bench/internal/app"
	"github.com/idem-dev/idem/store/memory"
)

const body = `{"amount":1000,"currency":"eur","customer":"cus_123"}`

// call sends one POST of the operation with key to h and checks the
// answer.
func call(tb testing.TB, h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", app.PathOperation, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Authorization", "Bearer sk_bench")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		tb.Fatalf("status %d: %s", w.Code, w.Body)
	}
	return w
}

// sides are the handlers compared: idem's default middleware on the
// memory store and the reference.
func sides(tb testing.TB) map[string]func(*app.Counter) http.Handler {
	return map[string]func(*app.Counter) http.Handler{
		"idem": func(c *app.Counter) http.Handler {
			h, closeEngine := Idem(memory.New(), c, false)
			tb.Cleanup(closeEngine)
			return h
		},
		"ref": Ref,
	}
}

// TestSidesAgree: both run the operation once per key and replay its
// answer byte for byte, so that the benchmark compares the same work.
func TestSidesAgree(t *testing.T) {
	for name, mk := range sides(t) {
		var c app.Counter
		h := mk(&c)
		first := call(t, h, "k-1").Body.String()
		again := call(t, h, "k-1").Body.String()
		if first != again || !strings.Contains(first, `"ok":true`) {
			t.Errorf("%s: first %q, replay %q", name, first, again)
		}
		if n := c.JSON(false); !strings.Contains(string(n), `"executions":1`) {
			t.Errorf("%s: counts %s after a call and its replay", name, n)
		}
	}
}

// replayKeys is how many answered keys the replay benchmark cycles over.
const replayKeys = 1024

// BenchmarkCall calls each side directly, one call at a time: first calls
// (a new key each) and replays (one of replayKeys answered keys). The
// harness runs its sub-benchmarks in turn, in separate processes, and
// compares them pair by pair (cmd/bench); cpu-ns/op is the process's
// CPU time per call, the garbage collector's included.
func BenchmarkCall(b *testing.B) {
	for _, side := range []string{"idem", "ref"} {
		for _, sc := range []string{"first", "replay"} {
			b.Run(side+"/"+sc, func(b *testing.B) {
				var c app.Counter
				h := sides(b)[side](&c)
				// Warm: the replayed keys answered, the first-call path
				// and the heap past their first growth.
				for i := range replayKeys {
					call(b, h, fmt.Sprintf("known-%d", i))
				}
				for i := range 2000 {
					call(b, h, fmt.Sprintf("warm-%d", i))
				}
				key := func(i int) string { return fmt.Sprintf("new-%d", i) }
				if sc == "replay" {
					key = func(i int) string { return fmt.Sprintf("known-%d", i%replayKeys) }
				}
				// Collect the warm-up's garbage now, so that a collection
				// of it does not land inside the timed loop of one run
				// and not another (which made idem's figure bimodal).
				runtime.GC()
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				for i := range b.N {
					call(b, h, key(i))
				}
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
