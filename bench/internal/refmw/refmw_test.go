package refmw

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func call(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
	if key != "" {
		r.Header.Set(KeyHeader, key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestReplays: a retry gets the first answer's status, headers and body,
// marked as a replay, and the handler runs once.
func TestReplays(t *testing.T) {
	var runs atomic.Int64
	h := new(Middleware).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Run", string(rune('0'+n)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}))
	first := call(h, "k1", `{"amount":1}`)
	again := call(h, "k1", `{"amount":1}`)
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
	for _, w := range []*httptest.ResponseRecorder{first, again} {
		if w.Code != http.StatusCreated || w.Body.String() != `{"id":"ch_1"}` || w.Header().Get("X-Run") != "1" ||
			w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("answer %d %q %v", w.Code, w.Body, w.Header())
		}
	}
	if first.Header().Get(ReplayedHeader) != "" || again.Header().Get(ReplayedHeader) != "true" {
		t.Errorf("replayed headers: first %q, retry %q", first.Header().Get(ReplayedHeader), again.Header().Get(ReplayedHeader))
	}
	if w := call(h, "k1", `{"amount":2}`); w.Code != http.StatusUnprocessableEntity {
		t.Errorf("another body under the same key: %d, want 422", w.Code)
	}
	if call(h, "", `{}`); runs.Load() != 2 {
		t.Errorf("a request without a key did not reach the handler")
	}
}

// TestRefusesConcurrentDuplicates: while the first call of a key runs,
// the others get 409 and the handler runs once; after it, they replay.
func TestRefusesConcurrentDuplicates(t *testing.T) {
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	h := new(Middleware).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		close(started)
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- call(h, "k", "{}") }()
	<-started
	var wg sync.WaitGroup
	var conflicts atomic.Int64
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if call(h, "k", "{}").Code == http.StatusConflict {
				conflicts.Add(1)
			}
		}()
	}
	wg.Wait()
	close(release)
	if w := <-done; w.Code != http.StatusCreated {
		t.Errorf("first call: %d", w.Code)
	}
	if conflicts.Load() != 20 || runs.Load() != 1 {
		t.Errorf("%d of 20 concurrent duplicates refused, handler ran %d times", conflicts.Load(), runs.Load())
	}
	if w := call(h, "k", "{}"); w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "true" {
		t.Errorf("after the first: %d %v, want a replay", w.Code, w.Header())
	}
}

// TestPanicFreesKey: a handler that panics leaves no record, so a retry
// runs it again.
func TestPanicFreesKey(t *testing.T) {
	var runs atomic.Int64
	h := new(Middleware).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		w.WriteHeader(http.StatusCreated)
	}))
	func() {
		defer func() { _ = recover() }()
		call(h, "k", "{}")
	}()
	if w := call(h, "k", "{}"); w.Code != http.StatusCreated || runs.Load() != 2 {
		t.Errorf("retry after a panic: %d, handler ran %d times", w.Code, runs.Load())
	}
}
