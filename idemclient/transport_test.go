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
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store/memory"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// api is the mobile app's answers/save behind idem's middleware, counting
// executions per key.
type api struct {
	url  string
	mu   sync.Mutex
	runs map[string]int
}

func newAPI(t *testing.T, delay time.Duration) *api {
	a := &api{runs: map[string]int{}}
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1}, idem.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { eng.Close() })
	var n atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.runs[r.Header.Get("Idempotency-Key")]++
		a.mu.Unlock()
		time.Sleep(delay)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, `{"id":%d,"saved":%s}`, n.Add(1), b)
	})
	ts := httptest.NewServer(idemhttp.Middleware(eng, idemhttp.Options{Logger: slog.New(slog.DiscardHandler), SharedAnonymousScope: true})(h))
	t.Cleanup(ts.Close)
	a.url = ts.URL
	return a
}

func (a *api) executions() (total, keys int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.runs {
		total += n
	}
	return total, len(a.runs)
}

// lossy loses the first n responses after the server has handled the
// request: the client sees a network error although the work was done.
type lossy struct {
	base http.RoundTripper
	lose atomic.Int32
}

func (l *lossy) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := l.base.RoundTrip(r)
	if err == nil && l.lose.Add(-1) >= 0 {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return nil, errors.New("read: connection reset by peer")
	}
	return res, err
}

func TestRetryAfterLostResponseRunsOnce(t *testing.T) {
	t.Parallel()
	a := newAPI(t, 0)
	base := &lossy{base: http.DefaultTransport}
	base.lose.Store(2)
	tr := &idemclient.Transport{Base: base}
	tr.Backoff = func(int) time.Duration { return time.Millisecond }
	client := &http.Client{Transport: tr}
	res, err := client.Post(a.url+"/answers/save", "application/json", strings.NewReader(`{"answerValue":3}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if !idemclient.Replayed(res) || string(body) != `{"id":1,"saved":{"answerValue":3}}` {
		t.Fatalf("%s replayed=%v", body, idemclient.Replayed(res))
	}
	if total, keys := a.executions(); total != 1 || keys != 1 {
		t.Fatalf("%d executions over %d keys; want 1 and 1", total, keys)
	}
	if len(idemclient.Key(res)) != 36 {
		t.Fatalf("key %q is not a UUID", idemclient.Key(res))
	}
}

func TestKeyKeptAndSafeMethodsUntouched(t *testing.T) {
	t.Parallel()
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()
	client := &http.Client{Transport: &idemclient.Transport{}}
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "mine")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	res, err = client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if fmt.Sprint(seen) != "[POST mine GET ]" {
		t.Fatalf("seen %v", seen)
	}
}

func TestInProgressIsRetriedUntilReplay(t *testing.T) {
	t.Parallel()
	a := newAPI(t, 300*time.Millisecond)
	tr := &idemclient.Transport{MaxAttempts: 10}
	client := &http.Client{Transport: tr}
	got := testkit.SameKey(context.Background(), client, 5, testkit.Request{
		URL: a.url + "/save", Key: "double-tap", Body: `{"v":1}`,
	})
	bodies := make([]string, len(got))
	for i, r := range got {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		bodies[i] = fmt.Sprint(r.Status, " ", string(r.Body))
	}
	for _, b := range bodies {
		if b != bodies[0] || !strings.HasPrefix(b, "200 ") {
			t.Fatalf("bodies %q", bodies)
		}
	}
	if total, _ := a.executions(); total != 1 {
		t.Fatalf("%d executions", total)
	}
}

// The mobile app's offline flow: the request is stored before it is sent; the app
// dies before the response; on restart the pending request is sent again
// with the same key, and the server replays it.
func TestOutboxSurvivesACrash(t *testing.T) {
	t.Parallel()
	a := newAPI(t, 0)
	dir := t.TempDir()
	ob, err := idemclient.OpenOutbox(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The first process: the response is lost every time (offline).
	base := &lossy{base: http.DefaultTransport}
	base.lose.Store(100)
	tr := &idemclient.Transport{Base: base, Outbox: ob, MaxAttempts: 2}
	tr.Backoff = func(int) time.Duration { return time.Millisecond }
	_, err = (&http.Client{Transport: tr}).Post(a.url+"/api/funnels/stress/assessments/a1/answers/save", "application/json", strings.NewReader(`{"stepId":"s1","questionId":"q1","answerValue":4}`))
	if err == nil {
		t.Fatal("the offline request succeeded")
	}
	pending, err := ob.List()
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending %v, %v", pending, err)
	}
	// Both attempts reached the server, which ran the first and replayed
	// the second; the client saw neither response.
	if total, _ := a.executions(); total != 1 {
		t.Fatalf("%d executions before restart, want 1", total)
	}
	// The restarted app reopens the outbox and sends what is pending.
	ob2, _ := idemclient.OpenOutbox(dir)
	tr2 := &idemclient.Transport{Outbox: ob2}
	results, err := tr2.SendPending(context.Background())
	if err != nil || len(results) != 1 || results[0].Pending.Key != pending[0].Key || results[0].Response.StatusCode != 200 {
		t.Fatalf("SendPending: %v %v", results, err)
	}
	results[0].Response.Body.Close()
	if left, _ := ob2.List(); len(left) != 0 {
		t.Fatalf("%d requests still pending", len(left))
	}
	if total, keys := a.executions(); total != 1 || keys != 1 {
		t.Fatalf("%d executions over %d keys; the retries must reuse the key", total, keys)
	}
}

func TestOutboxDropsExpiredRequests(t *testing.T) {
	t.Parallel()
	a := newAPI(t, 0)
	ob, _ := idemclient.OpenOutbox(t.TempDir())
	old := time.Now().Add(-25 * time.Hour)
	ob.Put(idemclient.Pending{Key: "old", Method: "POST", URL: a.url + "/x", Body: []byte(`{}`), Created: old})
	ob.Put(idemclient.Pending{Key: "fresh", Method: "POST", URL: a.url + "/x", Body: []byte(`{}`), Created: time.Now()})
	tr := &idemclient.Transport{Outbox: ob}
	results, err := tr.SendPending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[string]string{}
	for _, r := range results {
		if r.Response != nil {
			r.Response.Body.Close()
			statuses[r.Pending.Key] = r.Response.Status
		} else {
			statuses[r.Pending.Key] = r.Err.Error()
		}
	}
	if !errors.Is(results[0].Err, idemclient.ErrExpired) || statuses["fresh"] != "200 OK" {
		t.Fatalf("statuses %v", statuses)
	}
	if total, keys := a.executions(); total != 1 || a.runs["fresh"] != 1 || keys != 1 {
		t.Fatalf("%d executions %v; the expired request must not be sent", total, a.runs)
	}
	if left, _ := ob.List(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}
