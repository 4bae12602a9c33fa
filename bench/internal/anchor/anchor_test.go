package anchor

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble"
)

// countingWAL passes appends to a real Pebble DB and counts them by kind,
// noting any that was not synced.
type countingWAL struct {
	db       *pebble.DB
	mu       sync.Mutex
	kinds    map[byte]int
	unsynced int
}

func (c *countingWAL) LogData(data []byte, opts *pebble.WriteOptions) error {
	c.mu.Lock()
	c.kinds[data[0]]++
	if opts == nil || !opts.Sync {
		c.unsynced++
	}
	c.mu.Unlock()
	return c.db.LogData(data, opts)
}

func (c *countingWAL) count(kind byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kinds[kind]
}

// TestTwoSyncedAppendsPerRequest: every request is logged with a synced
// append before the upstream sees it, and its answer with a second
// synced append before the client gets it.
func TestTwoSyncedAppendsPerRequest(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wal := &countingWAL{db: db, kinds: map[byte]int{}}
	var upstreamCalls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls.Add(1)
		// This request's record is in the log already; its answer's is not.
		if q, a := wal.count(KindRequest), wal.count(KindResponse); q < int(upstreamCalls.Load()) || a >= q {
			t.Errorf("upstream called with %d request and %d answer records logged", q, a)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"` + r.Header.Get(KeyHeader) + `"}`))
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	px := httptest.NewServer(New(u, nil, wal))
	defer px.Close()

	const n = 40
	walBefore := db.Metrics().WAL.BytesWritten
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", px.URL+"/charges", strings.NewReader(`{"amount":1}`))
			req.Header.Set(KeyHeader, "k"+string(rune('a'+i%26)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Errorf("status %d", resp.StatusCode)
			}
			// The answer is logged before the client has it.
			if a := wal.count(KindResponse); a < 1 {
				t.Errorf("answer received with %d answers logged", a)
			}
		}()
	}
	wg.Wait()
	if q, a := wal.count(KindRequest), wal.count(KindResponse); q != n || a != n {
		t.Errorf("%d requests: %d request and %d answer records, want %d each", n, q, a, n)
	}
	if wal.unsynced != 0 {
		t.Errorf("%d appends without pebble.Sync", wal.unsynced)
	}
	if got := db.Metrics().WAL.BytesWritten - walBefore; got == 0 {
		t.Error("nothing reached Pebble's WAL")
	}
}

// TestFailedAppendRefuses: a request whose record cannot be logged is not
// forwarded.
func TestFailedAppendRefuses(t *testing.T) {
	var called atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called.Store(true) }))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	rec := httptest.NewRecorder()
	New(u, nil, failingWAL{}).ServeHTTP(rec, httptest.NewRequest("POST", "/charges", strings.NewReader("{}")))
	if rec.Code != http.StatusServiceUnavailable || called.Load() {
		t.Errorf("status %d, upstream called %v; want 503 and no call", rec.Code, called.Load())
	}
}

type failingWAL struct{}

func (failingWAL) LogData([]byte, *pebble.WriteOptions) error { return pebble.ErrClosed }
