package idemclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemclient"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

var (
	quietLog    = slog.New(slog.DiscardHandler)
	quietEngine = idem.WithLogger(quietLog)
)

// holdAPI is an API behind the real middleware over TCP whose handler
// holds its first execution until the test lets it go (later ones answer
// at once), counting executions.
type holdAPI struct {
	url     string
	runs    atomic.Int32
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newHoldAPI(t *testing.T, p idem.Policy) *holdAPI {
	t.Helper()
	a := &holdAPI{started: make(chan struct{}, 8), release: make(chan struct{})}
	p.CleanupInterval = -1
	eng := idem.New(memory.New(), p, quietEngine)
	t.Cleanup(func() { eng.Close() })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.runs.Add(1) == 1 {
			a.started <- struct{}{}
			<-a.release
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"ok":true}`)
	})
	ts := httptest.NewServer(idemhttp.Middleware(eng, idemhttp.Options{Logger: quietLog, SharedAnonymousScope: true})(h))
	t.Cleanup(ts.Close)
	t.Cleanup(a.free) // before the server closes: no handler left waiting
	a.url = ts.URL
	return a
}

func (a *holdAPI) free() { a.once.Do(func() { close(a.release) }) }

// The first request holds its key past the record's expiry (a TTL of two
// seconds). A retry of it told "in progress, kept until T" must stop
// before T: after T the server has forgotten the key, and the retry would
// run the operation a second time.
func TestRetriesStopBeforeTheKeyExpires(t *testing.T) {
	t.Parallel()
	a := newHoldAPI(t, idem.Policy{TTL: 2 * time.Second, Lease: time.Second})
	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", a.url, strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "short-lived")
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		first <- err
	}()
	<-a.started

	ob, _ := idemclient.OpenOutbox(t.TempDir())
	tr := &idemclient.Transport{Outbox: ob, MaxAttempts: 20}
	req, _ := http.NewRequest("POST", a.url, strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "short-lived")
	sent := time.Now()
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil {
		res.Body.Close()
		t.Fatalf("got a final %d", res.StatusCode)
	}
	var e *idemclient.Error
	if !errors.As(err, &e) || !errors.Is(err, idemclient.ErrKeyExpired) || !errors.Is(err, idemclient.ErrExpired) {
		t.Fatalf("%v; want ErrKeyExpired (matching ErrExpired)", err)
	}
	if e.KeyExpires.IsZero() || e.KeyExpires.After(sent.Add(2*time.Second)) || !e.MayHaveRun || e.Kind != "in_progress" {
		t.Fatalf("error %+v: want the key's expiry, at most 2 s after the request", e)
	}
	if left, _ := ob.List(); len(left) != 0 {
		t.Fatalf("%d requests still pending: an expired key must leave the outbox", len(left))
	}
	// Past the record's expiry, nothing the client sent runs again.
	time.Sleep(time.Until(sent.Add(2500 * time.Millisecond)))
	a.free()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := a.runs.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// A replay and a conflict tell the key's expiry; a request left pending
// keeps it in the outbox, and SendPending drops it unsent once it passed.
func TestKeyExpiryToldAndKeptInTheOutbox(t *testing.T) {
	t.Parallel()
	a := newHoldAPI(t, idem.Policy{}) // a day
	client := &http.Client{Transport: &idemclient.Transport{}}
	do := func(c *http.Client, key, body string) (*http.Response, error) {
		req, _ := http.NewRequest("POST", a.url, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		return c.Do(req)
	}
	inADay := func(t *testing.T, what string, got time.Time, before time.Time) {
		t.Helper()
		if got.Before(before.Add(24*time.Hour-3*time.Second)) || got.After(time.Now().Add(24*time.Hour)) {
			t.Fatalf("%s: key expires %v; want a day from %v", what, got, before)
		}
	}

	// The first request runs; the second is held as in progress, and
	// stays pending with the expiry it was told.
	start := time.Now()
	go func() {
		res, err := do(http.DefaultClient, "day-key", `{}`)
		if err == nil {
			res.Body.Close()
		}
	}()
	<-a.started
	ob, _ := idemclient.OpenOutbox(t.TempDir())
	tr := &idemclient.Transport{Outbox: ob, MaxAttempts: 1}
	_, err := do(&http.Client{Transport: tr}, "day-key", `{}`)
	var e *idemclient.Error
	if !errors.As(err, &e) || !errors.Is(err, idemclient.ErrInProgress) {
		t.Fatalf("%v; want ErrInProgress", err)
	}
	inADay(t, "in progress", e.KeyExpires, start)
	pending, _ := ob.List()
	if len(pending) != 1 || !pending[0].KeyExpires.Equal(e.KeyExpires) {
		t.Fatalf("pending %+v; want the request with its key's expiry %v", pending, e.KeyExpires)
	}
	a.free()

	// Replayed, the response says until when.
	deadline := time.Now().Add(30 * time.Second)
	var res *http.Response
	for {
		if res, err = do(client, "day-key", `{}`); err == nil && idemclient.Replayed(res) {
			break
		}
		if err == nil {
			res.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replay: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.Body.Close()
	exp, ok := idemclient.KeyExpires(res)
	if !ok {
		t.Fatalf("the replay tells no expiry: %v", res.Header)
	}
	inADay(t, "replay", exp, start)

	// A conflict too.
	_, err = do(client, "day-key", `{"other":1}`)
	if !errors.As(err, &e) || !errors.Is(err, idemclient.ErrConflict) {
		t.Fatalf("%v; want ErrConflict", err)
	}
	inADay(t, "payload mismatch", e.KeyExpires, start)

	// A day and an hour later, the pending request is dropped unsent.
	before := a.runs.Load()
	later := &idemclient.Transport{Outbox: ob}
	later.MaxAge = 48 * time.Hour // the request itself is young enough
	later.Now = func() time.Time { return time.Now().Add(25 * time.Hour) }
	results, err := later.SendPending(context.Background())
	if err != nil || len(results) != 1 || !errors.Is(results[0].Err, idemclient.ErrKeyExpired) {
		t.Fatalf("SendPending: %v %+v", err, results)
	}
	if left, _ := ob.List(); len(left) != 0 || a.runs.Load() != before {
		t.Fatalf("%d pending, %d executions after %d: the request must leave the outbox unsent", len(left), a.runs.Load(), before)
	}
}

// The first answer tells its key's expiry too, as replays do: a client
// that got its answer knows how long a retry would still replay it.
func TestKeyExpiryToldOnTheFirstAnswer(t *testing.T) {
	t.Parallel()
	a := newHoldAPI(t, idem.Policy{}) // a day
	a.free()
	start := time.Now()
	req, _ := http.NewRequest("POST", a.url, strings.NewReader(`{}`))
	res, err := (&http.Client{Transport: &idemclient.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || idemclient.Replayed(res) {
		t.Fatalf("first answer: %d, replayed %v", res.StatusCode, idemclient.Replayed(res))
	}
	exp, ok := idemclient.KeyExpires(res)
	if !ok {
		t.Fatalf("the first answer tells no expiry: %v", res.Header)
	}
	if exp.Before(start.Add(24*time.Hour-3*time.Second)) || exp.After(time.Now().Add(24*time.Hour)) {
		t.Fatalf("key expires %v; want a day from %v", exp, start)
	}
}

// The expiry is read from the header, else from the problem body (both
// shapes), on this client's clock: the server's Date says how far off it
// is.
func TestKeyExpiresOnTheClientsClock(t *testing.T) {
	t.Parallel()
	server := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // the server's clock runs ten years ahead
	res := &http.Response{Header: http.Header{
		"Date":                    {server.Format(http.TimeFormat)},
		"Idempotency-Key-Expires": {server.Add(time.Hour).Format(http.TimeFormat)},
	}}
	got, ok := idemclient.KeyExpires(res)
	if want := time.Now().Add(time.Hour - time.Second); !ok || got.Before(want.Add(-5*time.Second)) || got.After(want.Add(time.Second)) {
		t.Fatalf("KeyExpires = %v, %v; want about %v", got, ok, want)
	}
	if _, ok := idemclient.KeyExpires(&http.Response{Header: http.Header{}}); ok {
		t.Fatal("an answer without the header tells an expiry")
	}
}

// A server that tells the expiry only in its problem body, in either
// shape, is understood too: asked to come back after the key is gone, the
// transport stops.
func TestKeyExpiryFromTheBody(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{
		`{"type":"about:blank#in_progress","conflict_type":"in_progress","key_expires_at":%q}`,
		`{"success":false,"error":{"code":"OPERATION_IN_PROGRESS","details":{"conflictType":"in_progress","keyExpiresAt":%q}}}`,
	} {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, shape, time.Now().Add(10*time.Second).UTC().Format(time.RFC3339))
		}))
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{}`))
		_, err := (&http.Client{Transport: &idemclient.Transport{MaxAttempts: 5}}).Do(req)
		srv.Close()
		var e *idemclient.Error
		if !errors.As(err, &e) || !errors.Is(err, idemclient.ErrKeyExpired) || e.KeyExpires.IsZero() || calls.Load() != 1 {
			t.Fatalf("%s: %v after %d calls; want ErrKeyExpired after one", shape, err, calls.Load())
		}
	}
}
