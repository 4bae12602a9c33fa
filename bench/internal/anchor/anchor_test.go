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
	last     []byte // the last record appended
}

func (c *countingWAL) LogData(data []byte, opts *pebble.WriteOptions) error {
	c.mu.Lock()
	c.kinds[data[0]]++
	c.last = append(c.last[:0], data...)
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
	wal, db := openWAL(t)
	var upstreamCalls atomic.Int64
	px := proxyT(t, wal, Two, func() {
		n := int(upstreamCalls.Add(1))
		// This request's record is in the log already; its answer's is not.
		if q, a := wal.count(KindRequest), wal.count(KindResponse); q < n || a >= q {
			t.Errorf("upstream called with %d request and %d answer records logged", q, a)
		}
	})
	walBefore := db.Metrics().WAL.BytesWritten
	callAll(t, px, 40, func() {
		// The answer is logged before the client has it.
		if a := wal.count(KindResponse); a < 1 {
			t.Errorf("answer received with %d answers logged", a)
		}
	})
	if q, a, p := wal.count(KindRequest), wal.count(KindResponse), wal.count(KindPair); q != 40 || a != 40 || p != 0 {
		t.Errorf("40 requests: %d request, %d answer and %d pair records, want 40, 40, 0", q, a, p)
	}
	if wal.unsynced != 0 {
		t.Errorf("%d appends without pebble.Sync", wal.unsynced)
	}
	if got := db.Metrics().WAL.BytesWritten - walBefore; got == 0 {
		t.Error("nothing reached Pebble's WAL")
	}
}

// TestOneSyncedAppendPerRequest: in One mode a request makes exactly one
// append, synced, after the upstream's answer and before the client gets
// it, and it holds the request's bytes and the answer's.
func TestOneSyncedAppendPerRequest(t *testing.T) {
	wal, db := openWAL(t)
	var upstreamCalls atomic.Int64
	px := proxyT(t, wal, One, func() {
		n := int(upstreamCalls.Add(1))
		// Nothing of this request is in the log yet.
		if p := wal.count(KindPair); p >= n {
			t.Errorf("upstream call %d with %d records logged", n, p)
		}
	})
	walBefore := db.Metrics().WAL.BytesWritten
	var answered atomic.Int64
	callAll(t, px, 40, func() {
		// The k-th answer received was logged before it came: k records
		// at least.
		if k, p := int(answered.Add(1)), wal.count(KindPair); p < k {
			t.Errorf("answer %d received with %d records logged", k, p)
		}
	})
	if p, q, a := wal.count(KindPair), wal.count(KindRequest), wal.count(KindResponse); p != 40 || q != 0 || a != 0 {
		t.Errorf("40 requests: %d pair, %d request and %d answer records, want 40, 0, 0", p, q, a)
	}
	if wal.unsynced != 0 {
		t.Errorf("%d appends without pebble.Sync", wal.unsynced)
	}
	wal.mu.Lock()
	rec := wal.last
	wal.mu.Unlock()
	for _, want := range []string{"POST /charges", `{"amount":1}`, "201 Created", `{"id":"k`} {
		if !strings.Contains(string(rec), want) {
			t.Errorf("record %q lacks %q", rec, want)
		}
	}
	if got := db.Metrics().WAL.BytesWritten - walBefore; got == 0 {
		t.Error("nothing reached Pebble's WAL")
	}
}

func openWAL(t *testing.T) (*countingWAL, *pebble.DB) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &countingWAL{db: db, kinds: map[byte]int{}}, db
}

// proxyT starts an upstream that calls onCall, then answers 201 with the
// key, and the proxy to it.
func proxyT(t *testing.T, wal WAL, appends Appends, onCall func()) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		onCall()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"` + r.Header.Get(KeyHeader) + `"}`))
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	px := httptest.NewServer(New(u, nil, wal, appends))
	t.Cleanup(px.Close)
	return px.URL
}

// callAll sends n first calls at once, checks each answer and calls
// onAnswer after it.
func callAll(t *testing.T, px string, n int, onAnswer func()) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", px+"/charges", strings.NewReader(`{"amount":1}`))
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
			onAnswer()
		}()
	}
	wg.Wait()
}

// TestFailedAppendRefuses: in Two mode a request whose record cannot be
// logged is not forwarded; in One mode an answer that cannot be logged is
// not passed on (502).
func TestFailedAppendRefuses(t *testing.T) {
	for _, tc := range []struct {
		appends    Appends
		code       int
		wantCalled bool
	}{{Two, http.StatusServiceUnavailable, false}, {One, http.StatusBadGateway, true}} {
		var called atomic.Bool
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			called.Store(true)
			_, _ = w.Write([]byte("secret answer"))
		}))
		u, _ := url.Parse(up.URL)
		rec := httptest.NewRecorder()
		New(u, nil, failingWAL{}, tc.appends).ServeHTTP(rec, httptest.NewRequest("POST", "/charges", strings.NewReader("{}")))
		up.Close()
		if rec.Code != tc.code || called.Load() != tc.wantCalled || strings.Contains(rec.Body.String(), "secret") {
			t.Errorf("%d appends: status %d, upstream called %v, body %q; want %d, called %v, no answer",
				tc.appends, rec.Code, called.Load(), rec.Body, tc.code, tc.wantCalled)
		}
	}
}

type failingWAL struct{}

func (failingWAL) LogData([]byte, *pebble.WriteOptions) error { return pebble.ErrClosed }
