package idemclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemclient"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// profileAPI is the mobile app's funnels API (or any profile's) behind the
// middleware, with users told apart by X-User-ID, counting executions per
// user, endpoint and key. A handler that sees ?status=409 answers its own
// 409, the operation's outcome.
type profileAPI struct {
	url      string
	mu       sync.Mutex
	runs     map[string]int
	delay    time.Duration
	inFlight atomic.Int32
	maxIn    atomic.Int32
}

func newProfileAPI(t *testing.T, p *idemhttp.Profile, delay time.Duration) *profileAPI {
	t.Helper()
	a := &profileAPI{runs: map[string]int{}, delay: delay}
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1}, idem.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { eng.Close() })
	var ids atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.inFlight.Add(1)
		defer a.inFlight.Add(-1)
		for m := a.maxIn.Load(); n > m && !a.maxIn.CompareAndSwap(m, n); m = a.maxIn.Load() {
		}
		a.mu.Lock()
		a.runs[r.Header.Get("X-User-ID")+" "+r.URL.Path+" "+r.Header.Get("Idempotency-Key")]++
		a.mu.Unlock()
		time.Sleep(a.delay)
		b, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("status") == "409" {
			w.WriteHeader(http.StatusConflict)
		}
		fmt.Fprintf(w, `{"success":true,"data":{"id":"%d","user":%q,"path":%q,"received":%s}}`,
			ids.Add(1), r.Header.Get("X-User-ID"), r.URL.Path, b)
	})
	ts := httptest.NewServer(idemhttp.Middleware(eng, idemhttp.Options{
		Profile: p,
		Tenant:  idemhttp.TenantHeader("X-User-ID"),
		Logger:  slog.New(slog.DiscardHandler),
	})(h))
	t.Cleanup(ts.Close)
	a.url = ts.URL
	return a
}

// waitRunning waits until the handler runs a request.
func waitRunning(t *testing.T, a *profileAPI) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); a.inFlight.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never reached the handler")
		}
	}
}

func (a *profileAPI) count(user, path, key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[user+" "+path+" "+key]
}

func (a *profileAPI) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.runs {
		n += c
	}
	return n
}

// offline fails every request before it is sent, as a phone in a tunnel.
type offline struct{ tries atomic.Int32 }

func (o *offline) RoundTrip(r *http.Request) (*http.Response, error) {
	o.tries.Add(1)
	if r.Body != nil {
		r.Body.Close()
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: network is unreachable")}
}

func fast(int) time.Duration { return time.Millisecond }

func post(t *testing.T, c *http.Client, url, user, key, body string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-ID", user)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return c.Do(req)
}

const (
	savePath     = "/api/funnels/stress/assessments/a1/answers/save"
	completePath = "/api/funnels/stress/assessments/a1/complete"
)

// The mobile app scopes keys per user and endpoint: one key on answers/save
// and on complete, for two users, is four requests. Each must wait in the
// outbox on its own, and finishing one must not drop another.
func TestOutboxKeepsRequestsThatShareAKey(t *testing.T) {
	t.Parallel()
	a := newProfileAPI(t, idemhttp.Mobile(), 0)
	ob, _ := idemclient.OpenOutbox(t.TempDir())
	down := &offline{}
	tr := &idemclient.Transport{Base: down, Outbox: ob, MaxAttempts: 1}
	c := &http.Client{Transport: tr}
	for _, user := range []string{"alice", "bob"} {
		for _, path := range []string{savePath, completePath} {
			if _, err := post(t, c, a.url+path, user, "k-shared", `{"v":1}`); err == nil {
				t.Fatal("an offline request succeeded")
			}
		}
	}
	pending, err := ob.List()
	if err != nil || len(pending) != 4 {
		t.Fatalf("%d pending (%v), want 4: requests sharing a key overwrote each other", len(pending), err)
	}
	// Back online: one of them finishes through the live path first; it
	// must remove its own entry only.
	tr.Base = nil
	tr.MaxAttempts = 4
	res, err := post(t, c, a.url+savePath, "alice", "k-shared", `{"v":1}`)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if left, _ := ob.List(); len(left) != 3 {
		t.Fatalf("%d pending after alice's save finished, want 3", len(left))
	}
	results, err := tr.SendPending(context.Background())
	if err != nil || len(results) != 3 {
		t.Fatalf("SendPending: %d results, %v", len(results), err)
	}
	for _, user := range []string{"alice", "bob"} {
		for _, path := range []string{savePath, completePath} {
			if n := a.count(user, path, "k-shared"); n != 1 {
				t.Errorf("%s %s ran %d times, want 1", user, path, n)
			}
		}
	}
	if left, _ := ob.List(); len(left) != 0 {
		t.Fatalf("%d still pending", len(left))
	}
}

// A caller whose request got no answer must be able to send it again with
// the same key, so the server replays instead of running it twice.
func TestGaveUpErrorCarriesTheKey(t *testing.T) {
	t.Parallel()
	a := newProfileAPI(t, idemhttp.IETF(), 0)
	lost := &lossy{base: http.DefaultTransport}
	lost.lose.Store(2)
	tr := &idemclient.Transport{Base: lost, MaxAttempts: 2}
	tr.Backoff = fast
	c := &http.Client{Transport: tr}
	_, err := post(t, c, a.url+"/charges", "alice", "", `{"amount":1000}`)
	var e *idemclient.Error
	if !errors.As(err, &e) || !errors.Is(err, idemclient.ErrGaveUp) {
		t.Fatalf("error %v (%T), want an *idemclient.Error matching ErrGaveUp", err, err)
	}
	if len(e.Key) != 36 || !e.MayHaveRun || e.Attempts != 2 {
		t.Fatalf("key %q, may have run %v, attempts %d", e.Key, e.MayHaveRun, e.Attempts)
	}
	// The caller sends the same request again with the key it learnt.
	res, err := post(t, c, a.url+"/charges", "alice", e.Key, `{"amount":1000}`)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if !idemclient.Replayed(res) || a.total() != 1 {
		t.Fatalf("replayed %v, %d executions; want a replay of the one execution", idemclient.Replayed(res), a.total())
	}
	// A request that never left the phone says so.
	_, err = post(t, &http.Client{Transport: &idemclient.Transport{Base: &offline{}, MaxAttempts: 2}}, a.url+"/charges", "alice", "", `{}`)
	if !errors.As(err, &e) || e.MayHaveRun || e.Key == "" {
		t.Fatalf("offline: %v, may have run %v", err, e != nil && e.MayHaveRun)
	}
}

// In every profile a 409 in_progress is not a final answer, and idem's
// conflicts (422 payload_mismatch, 409 DUPLICATE_OPERATION ...) are errors
// that cannot be mistaken for it, while the API's own 409 stays a response.
func TestInProgressAndConflictsInEveryProfile(t *testing.T) {
	t.Parallel()
	for _, p := range []*idemhttp.Profile{idemhttp.IETF(), idemhttp.Stripe(), idemhttp.Mobile(), idemhttp.WorkflowAdmin()} {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			a := newProfileAPI(t, p, 400*time.Millisecond)
			tr := &idemclient.Transport{MaxAttempts: 1}
			c := &http.Client{Transport: tr}
			url := a.url + savePath
			first := make(chan error, 1)
			go func() {
				res, err := post(t, c, url, "alice", "k1", `{"v":1}`)
				if err == nil {
					res.Body.Close()
				}
				first <- err
			}()
			waitRunning(t, a)
			_, err := post(t, c, url, "alice", "k1", `{"v":1}`)
			var e *idemclient.Error
			if !errors.Is(err, idemclient.ErrInProgress) || errors.Is(err, idemclient.ErrConflict) || !errors.As(err, &e) || e.Key != "k1" {
				t.Fatalf("concurrent retry: %v; want ErrInProgress with key k1", err)
			}
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			_, err = post(t, c, url, "alice", "k1", `{"v":2}`)
			if !errors.Is(err, idemclient.ErrConflict) || errors.Is(err, idemclient.ErrInProgress) || !errors.As(err, &e) || e.Kind != "payload_mismatch" || !e.MayHaveRun {
				t.Fatalf("changed body: %v; want ErrConflict payload_mismatch", err)
			}
			res, err := post(t, c, url+"?status=409", "alice", "k2", `{"v":1}`)
			if err != nil {
				t.Fatalf("the API's own 409: %v", err)
			}
			res.Body.Close()
			if res.StatusCode != 409 {
				t.Fatalf("status %d", res.StatusCode)
			}
			if n := a.total(); n != 2 {
				t.Fatalf("%d executions, want 2", n)
			}
		})
	}
}

// With the retries exhausted on in_progress, the request stays pending and
// no answer is given as final.
func TestInProgressAfterLastAttemptStaysPending(t *testing.T) {
	t.Parallel()
	a := newProfileAPI(t, idemhttp.Mobile(), 1500*time.Millisecond)
	ob, _ := idemclient.OpenOutbox(t.TempDir())
	tr := &idemclient.Transport{Outbox: ob, MaxAttempts: 2}
	tr.Backoff = fast
	tr.Now = time.Now
	c := &http.Client{Transport: tr}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := post(t, &http.Client{}, a.url+savePath, "alice", "k1", `{}`)
		if err == nil {
			res.Body.Close()
		}
	}()
	waitRunning(t, a)
	res, err := post(t, c, a.url+savePath, "alice", "k1", `{}`)
	if err == nil {
		res.Body.Close()
		t.Fatalf("got a final %d while the first request runs", res.StatusCode)
	}
	if !errors.Is(err, idemclient.ErrInProgress) {
		t.Fatalf("%v; want ErrInProgress", err)
	}
	if left, _ := ob.List(); len(left) != 1 {
		t.Fatalf("%d pending, want 1", len(left))
	}
	<-done
}

// SendPending sends with a bound on concurrency, hands back every answer,
// and stops at once when the server cannot be reached instead of backing
// off for each entry in turn.
func TestSendPendingConcurrentWithResponses(t *testing.T) {
	t.Parallel()
	a := newProfileAPI(t, idemhttp.Mobile(), 150*time.Millisecond)
	ob, _ := idemclient.OpenOutbox(t.TempDir())
	for i := range 12 {
		ob.Put(idemclient.Pending{Key: fmt.Sprint("k", i), Method: "POST", URL: a.url + savePath,
			Header: http.Header{"X-User-Id": {"alice"}}, Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Created: time.Now()})
	}
	tr := &idemclient.Transport{Outbox: ob}
	tr.PendingConcurrency = 3
	results, err := tr.SendPending(context.Background())
	if err != nil || len(results) != 12 {
		t.Fatalf("%d results, %v", len(results), err)
	}
	for _, r := range results {
		if r.Err != nil || r.Response == nil {
			t.Fatalf("%s: %v", r.Pending.Key, r.Err)
		}
		b, _ := io.ReadAll(r.Response.Body)
		r.Response.Body.Close()
		want := fmt.Sprintf(`"received":{"n":%s}`, strings.TrimPrefix(r.Pending.Key, "k"))
		if !strings.Contains(string(b), want) {
			t.Fatalf("%s got body %s", r.Pending.Key, b)
		}
	}
	if m := a.maxIn.Load(); m < 2 || m > 3 {
		t.Fatalf("%d requests in flight at most, want 2..3", m)
	}
	if a.total() != 12 {
		t.Fatalf("%d executions", a.total())
	}
}

func TestSendPendingStopsWhenOffline(t *testing.T) {
	t.Parallel()
	ob, _ := idemclient.OpenOutbox(t.TempDir())
	for i := range 50 {
		ob.Put(idemclient.Pending{Key: fmt.Sprint("k", i), Method: "POST", URL: "http://127.0.0.1:1/x", Created: time.Now()})
	}
	down := &offline{}
	tr := &idemclient.Transport{Base: down, Outbox: ob}
	tr.PendingConcurrency = 4
	results, err := tr.SendPending(context.Background())
	if !errors.Is(err, idemclient.ErrOffline) {
		t.Fatalf("err %v, want ErrOffline", err)
	}
	if len(results) != 50 {
		t.Fatalf("%d results", len(results))
	}
	for _, r := range results {
		if !errors.Is(r.Err, idemclient.ErrOffline) {
			t.Fatalf("%s: %v", r.Pending.Key, r.Err)
		}
	}
	if n := down.tries.Load(); n > 4 {
		t.Fatalf("%d connection attempts for 50 entries while offline, want at most the concurrency (4)", n)
	}
	if left, _ := ob.List(); len(left) != 50 {
		t.Fatalf("%d pending, want 50", len(left))
	}
}

// Credentials are not written to disk; an Authorize hook puts them back
// when the outbox is sent after a restart.
func TestOutboxLeavesCredentialsOut(t *testing.T) {
	t.Parallel()
	var seen atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization") + "|" + r.Header.Get("Cookie"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	ob, _ := idemclient.OpenOutbox(dir)
	tr := &idemclient.Transport{Base: &offline{}, Outbox: ob, MaxAttempts: 1}
	req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer sk_live_secret")
	req.Header.Set("Cookie", "session=s3cr3t")
	req.Header.Set("X-User-ID", "alice")
	if _, err := (&http.Client{Transport: tr}).Do(req); err == nil {
		t.Fatal("offline request succeeded")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "sk_live_secret") || strings.Contains(string(b), "s3cr3t") {
			t.Fatalf("a credential is stored at rest: %s", b)
		}
		if !strings.Contains(string(b), "alice") {
			t.Fatalf("the user header is missing: %s", b)
		}
	}
	tr2 := &idemclient.Transport{Outbox: ob}
	tr2.Authorize = func(r *http.Request, p idemclient.Pending) error {
		if p.Header.Get("X-User-ID") == "alice" {
			r.Header.Set("Authorization", "Bearer sk_live_secret")
		}
		return nil
	}
	if _, err := tr2.SendPending(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := seen.Load(); got != "Bearer sk_live_secret|" {
		t.Fatalf("server saw %q", got)
	}
}

// An outbox written before entries were keyed by scope, method and URL
// names its files by the key alone; they are sent and removed all the same.
func TestOutboxReadsEntriesOfTheOldLayout(t *testing.T) {
	t.Parallel()
	a := newProfileAPI(t, idemhttp.Mobile(), 0)
	dir := t.TempDir()
	old := fmt.Sprintf(`{"idempotency_key":"k-old","method":"POST","url":%q,"header":{"X-User-Id":["alice"]},"body":"e30=","timestamp":%q}`,
		a.url+savePath, time.Now().Format(time.RFC3339Nano))
	if err := os.WriteFile(filepath.Join(dir, store.HashKey("outbox", "k-old")+".json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	ob, _ := idemclient.OpenOutbox(dir)
	results, err := (&idemclient.Transport{Outbox: ob}).SendPending(context.Background())
	if err != nil || len(results) != 1 || results[0].Err != nil {
		t.Fatalf("%v %v", results, err)
	}
	results[0].Response.Body.Close()
	if left, _ := ob.List(); len(left) != 0 || a.count("alice", savePath, "k-old") != 1 {
		t.Fatalf("%d left, %d runs", len(left), a.count("alice", savePath, "k-old"))
	}
}
