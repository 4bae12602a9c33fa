package idemclient_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem/idemclient"
	"github.com/idem-dev/idem/idemhttp"
)

// The mobile app with four requests that share one key (two users, two
// endpoints) is killed while retrying: alice's requests reach the server
// but their answers are lost, bob's never leave the phone. The restarted
// app sends the outbox: every request runs exactly once.
func TestOutboxKilledAndResumed(t *testing.T) {
	t.Parallel()
	if env := os.Getenv("IDEMCLIENT_KILL_CHILD"); env != "" {
		killChild(env)
		return
	}
	a := newProfileAPI(t, idemhttp.Mobile(), 0)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOutboxKilledAndResumed$")
	cmd.Env = append(os.Environ(), "IDEMCLIENT_KILL_CHILD="+dir+"|"+a.url)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ob, _ := idemclient.OpenOutbox(dir)
	deadline := time.Now().Add(30 * time.Second)
	for {
		pending, _ := ob.List()
		if len(pending) == 4 && a.count("alice", savePath, "k-shared") == 1 && a.count("alice", completePath, "k-shared") == 1 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the app did not store its 4 requests: %d pending, %d executions", len(pending), a.total())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a few more lost retries
	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	ob2, _ := idemclient.OpenOutbox(dir)
	tr := &idemclient.Transport{Outbox: ob2}
	results, err := tr.SendPending(context.Background())
	if err != nil || len(results) != 4 {
		t.Fatalf("%d results, %v", len(results), err)
	}
	for _, r := range results {
		if r.Err != nil || r.Response.StatusCode != 200 {
			t.Fatalf("%s %s: %v", r.Pending.Header.Get("X-User-ID"), r.Pending.URL, r.Err)
		}
		r.Response.Body.Close()
	}
	for _, user := range []string{"alice", "bob"} {
		for _, path := range []string{savePath, completePath} {
			if n := a.count(user, path, "k-shared"); n != 1 {
				t.Errorf("%s %s ran %d times, want 1", user, path, n)
			}
		}
	}
	if left, _ := ob2.List(); len(left) != 0 {
		t.Fatalf("%d still pending", len(left))
	}
}

// killChild is the app until it is killed: alice's answers are lost, bob is
// offline; both retry for ever.
func killChild(env string) {
	dir, url, _ := strings.Cut(env, "|")
	ob, err := idemclient.OpenOutbox(dir)
	if err != nil {
		panic(err)
	}
	lost := &lossy{base: http.DefaultTransport}
	lost.lose.Store(1 << 30)
	for _, user := range []string{"alice", "bob"} {
		var base http.RoundTripper = lost
		if user == "bob" {
			base = &offline{}
		}
		tr := &idemclient.Transport{Base: base, Outbox: ob, MaxAttempts: 1 << 30}
		tr.Backoff = func(int) time.Duration { return 5 * time.Millisecond }
		for _, path := range []string{savePath, completePath} {
			go func() {
				req, _ := http.NewRequest("POST", url+path, strings.NewReader(`{"stepId":"s1","questionId":"q1","answerValue":3}`))
				req.Header.Set("X-User-ID", user)
				req.Header.Set("Idempotency-Key", "k-shared")
				(&http.Client{Transport: tr}).Do(req)
			}()
		}
	}
	select {}
}
