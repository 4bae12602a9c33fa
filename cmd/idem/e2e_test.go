package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
)

const chargeBody = `{"amount":1000,"currency":"eur"}`

// TestConcurrentOneKey: 200 concurrent POSTs with one key run the upstream
// once. Without wait the losers get 409 in_progress; with wait they all get
// the winner's response.
func TestConcurrentOneKey(t *testing.T) {
	t.Parallel()
	const n = 200
	for _, tc := range []struct {
		name, yaml string
		wait       bool
	}{
		{"no wait", "", false},
		{"wait", "defaults: {wait: 20s}\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := startAPI(t)
			g := startGateway(t, a.URL, t.TempDir(), tc.yaml)
			key := "race-" + strings.ReplaceAll(tc.name, " ", "-")
			got := testkit.SameKey(context.Background(), client, n, testkit.Request{
				URL: g.URL + "/charges?delay=400ms", Key: key,
				Header: http.Header{"Content-Type": {"application/json"}}, Body: chargeBody,
			})

			var ok, inProgress int
			var first []byte
			for i, c := range got {
				if c.Err != nil {
					t.Fatalf("request %d: %v", i, c.Err)
				}
				r := response{Status: c.Status, Header: c.Header, Body: c.Body}
				switch r.Status {
				case http.StatusCreated:
					ok++
					if first == nil {
						first = r.Body
					} else if !bytes.Equal(r.Body, first) {
						t.Errorf("2xx bodies differ:\n%s\n%s", first, r.Body)
					}
				case http.StatusConflict:
					inProgress++
					if p := r.problem(t); p["conflict_type"] != "in_progress" || p["idempotency_key"] != key {
						t.Errorf("409 problem = %v", p)
					}
					if r.Header.Get("Retry-After") == "" {
						t.Error("409 in_progress without Retry-After")
					}
				default:
					t.Errorf("status %d: %s", r.Status, r.Body)
				}
			}
			if got := a.stats(t).Executions[key]; got != 1 {
				t.Fatalf("upstream executions for %s = %d, want exactly 1", key, got)
			}
			if ok == 0 {
				t.Fatal("no 201 at all")
			}
			if tc.wait && ok != n {
				t.Errorf("with wait: %d of %d got 201 (%d got 409)", ok, n, inProgress)
			}
			if !tc.wait && inProgress == 0 {
				t.Errorf("no wait: no request saw 409 in_progress; the race did not happen")
			}
			t.Logf("%d × 201, %d × 409 in_progress, 1 execution", ok, inProgress)

			// The admin listener counted what happened.
			res, err := http.Get(g.Admin + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			m, _ := io.ReadAll(res.Body)
			res.Body.Close()
			for _, want := range []string{
				`idem_executions_total{code="2xx",route="/"} 1`,
				`idem_store_operation_duration_seconds_count{operation="reserve",result="ok"}`,
				"go_goroutines", "process_resident_memory_bytes",
			} {
				if !bytes.Contains(m, []byte(want)) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			if !tc.wait && !bytes.Contains(m, []byte(fmt.Sprintf(`idem_conflicts_total{conflict_type="in_progress",route="/"} %d`, inProgress))) {
				t.Errorf("/metrics does not count %d in_progress conflicts", inProgress)
			}
		})
	}
}

// TestReplay: the replay is byte-identical (status, body, replayed headers),
// marked Idempotent-Replayed: true, with Original-Request-Id.
func TestReplay(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "")

	first := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "order-1")
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	reqID := first.Header.Get("X-Request-Id")
	c := first.charge(t)
	if reqID == "" || c.RequestID != reqID {
		t.Errorf("X-Request-Id: response %q, upstream saw %q", reqID, c.RequestID)
	}
	if c.IdempotencyKey != "order-1" {
		t.Errorf("upstream saw Idempotency-Key %q", c.IdempotencyKey)
	}
	if first.Header.Get("Idempotent-Replayed") != "false" {
		t.Errorf("first: Idempotent-Replayed = %q", first.Header.Get("Idempotent-Replayed"))
	}

	for i := range 2 {
		r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "order-1")
		if r.Status != first.Status || !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("replay %d: %d %q, want %d %q", i, r.Status, r.Body, first.Status, first.Body)
		}
		for _, h := range []string{"Content-Type", "Location", "Content-Length"} {
			if r.Header.Get(h) != first.Header.Get(h) || r.Header.Get(h) == "" {
				t.Errorf("replay %s = %q, first %q", h, r.Header.Get(h), first.Header.Get(h))
			}
		}
		if r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay: Idempotent-Replayed = %q", r.Header.Get("Idempotent-Replayed"))
		}
		if got := r.Header.Get("Original-Request-Id"); got != reqID {
			t.Errorf("replay: Original-Request-Id = %q, want %q", got, reqID)
		}
		if id := r.Header.Get("X-Request-Id"); id == "" || id == reqID {
			t.Errorf("replay: X-Request-Id = %q, want its own", id)
		}
		if r.Header.Get("X-Charge-Count") != "" {
			t.Error("replay repeats X-Charge-Count, which is not a kept header")
		}
	}

	// A client's own X-Request-Id is used and reported on replays.
	r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "order-2", "X-Request-Id", "client-req-42")
	if r.Status != 201 || r.charge(t).RequestID != "client-req-42" || r.Header.Get("X-Request-Id") != "client-req-42" {
		t.Errorf("client request ID: %d %s %v", r.Status, r.Body, r.Header)
	}
	r = post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "order-2")
	if r.Header.Get("Original-Request-Id") != "client-req-42" {
		t.Errorf("Original-Request-Id = %q", r.Header.Get("Original-Request-Id"))
	}

	s := a.stats(t)
	if s.Executions["order-1"] != 1 || s.Executions["order-2"] != 1 {
		t.Errorf("executions = %v", s.Executions)
	}
}

// TestPayloadMismatch: another body is a 422; the same JSON with other key
// order and white space replays.
func TestPayloadMismatch(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "")
	first := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "pm-1")
	if first.Status != 201 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	r := post(t, g.URL+"/charges", `{"amount":1001,"currency":"eur"}`, "Idempotency-Key", "pm-1")
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("changed body: %d %s", r.Status, r.Body)
	}
	if p := r.problem(t); p["conflict_type"] != "payload_mismatch" || p["idempotency_key"] != "pm-1" {
		t.Errorf("problem = %v", p)
	}
	r = post(t, g.URL+"/charges", "{\n  \"currency\" : \"eur\",\n\t\"amount\": 1000 }\n", "Idempotency-Key", "pm-1")
	if r.Status != 201 || !bytes.Equal(r.Body, first.Body) || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("reordered body: %d %s %v", r.Status, r.Body, r.Header)
	}
	// Another target is another request too.
	r = post(t, g.URL+"/charges?delay=1ms", chargeBody, "Idempotency-Key", "pm-1")
	if r.Status != http.StatusUnprocessableEntity {
		t.Errorf("other target: %d %s", r.Status, r.Body)
	}
	if n := a.stats(t).Executions["pm-1"]; n != 1 {
		t.Errorf("executions = %d", n)
	}
}

// TestInvalidKeys: a too long key, a blank key and two Idempotency-Key
// fields are 400 problem+json, and the upstream is not called.
func TestInvalidKeys(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "")
	for _, tc := range []struct {
		name string
		hdr  []string
	}{
		{"300 bytes", []string{"Idempotency-Key", strings.Repeat("k", 300)}},
		{"empty", []string{"Idempotency-Key", ""}},
		{"blank", []string{"Idempotency-Key", "    "}},
		{"two fields", []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}},
		{"bad structured field", []string{"Idempotency-Key", `"unterminated`}},
	} {
		r := post(t, g.URL+"/charges", chargeBody, tc.hdr...)
		if r.Status != http.StatusBadRequest {
			t.Errorf("%s: status %d %s", tc.name, r.Status, r.Body)
			continue
		}
		r.problem(t)
	}
	if s := a.stats(t); s.Charges != 0 {
		t.Errorf("the upstream was called %d times: %v", s.Charges, s.Executions)
	}
	// A 255-byte key is fine.
	if r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", strings.Repeat("k", 255)); r.Status != 201 {
		t.Errorf("255-byte key: %d %s", r.Status, r.Body)
	}
}

// TestFailures: a 500 is released and runs again; a 409 is an outcome and
// is replayed.
func TestFailures(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "replay_headers: [X-Charge-Count]\n")
	for i := range 2 {
		r := post(t, g.URL+"/charges?status=500", chargeBody, "Idempotency-Key", "fail-500")
		if r.Status != 500 || r.Header.Get("Idempotent-Replayed") == "true" {
			t.Errorf("500 try %d: %d %v", i, r.Status, r.Header)
		}
	}
	if n := a.stats(t).Executions["fail-500"]; n != 2 {
		t.Errorf("500: executions = %d, want 2", n)
	}
	first := post(t, g.URL+"/charges?status=409", chargeBody, "Idempotency-Key", "fail-409")
	again := post(t, g.URL+"/charges?status=409", chargeBody, "Idempotency-Key", "fail-409")
	if first.Status != 409 || again.Status != 409 || !bytes.Equal(first.Body, again.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("409: %d %s / %d %s %v", first.Status, first.Body, again.Status, again.Body, again.Header)
	}
	if c := again.Header.Get("X-Charge-Count"); c == "" || c != first.Header.Get("X-Charge-Count") {
		t.Errorf("replay_headers: replayed X-Charge-Count %q, first %q", c, first.Header.Get("X-Charge-Count"))
	}
	if n := a.stats(t).Executions["fail-409"]; n != 1 {
		t.Errorf("409: executions = %d, want 1", n)
	}
}

// TestRoutes: a route that requires keys and fingerprints chosen fields;
// other paths pass through.
func TestRoutes(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), `
routes:
  - match: "POST /charges"
    key: required
    fingerprint: { fields: [amount] }
`)
	r := post(t, g.URL+"/charges", chargeBody)
	if r.Status != http.StatusBadRequest {
		t.Fatalf("keyless on a key: required route: %d %s", r.Status, r.Body)
	}
	r.problem(t)
	if r := post(t, g.URL+"/refunds", chargeBody); r.Status != http.StatusNotFound {
		t.Errorf("unrouted path: %d (want the upstream's 404)", r.Status)
	}
	first := post(t, g.URL+"/charges", `{"amount":1000,"currency":"eur"}`, "Idempotency-Key", "fields-1")
	same := post(t, g.URL+"/charges", `{"amount":1000,"currency":"usd"}`, "Idempotency-Key", "fields-1")
	if first.Status != 201 || same.Status != 201 || !bytes.Equal(first.Body, same.Body) || same.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a field outside the fingerprint changed: %d / %d %s", first.Status, same.Status, same.Body)
	}
	if r := post(t, g.URL+"/charges", `{"amount":2000,"currency":"eur"}`, "Idempotency-Key", "fields-1"); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("a fingerprinted field changed: %d %s", r.Status, r.Body)
	}
	if s := a.stats(t); s.Charges != 1 {
		t.Errorf("charges = %d, want 1", s.Charges)
	}
}

// TestCleanupCommand: records past their TTL are removed by idem cleanup.
// The test waits until the dry run counts all three expired rather than
// for a fixed time; the lease is as long as the TTL, since a 500 ms lease
// can run out on a loaded machine while its call is still recording.
func TestCleanupCommand(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	dir := t.TempDir()
	g := startGateway(t, a.URL, dir, "defaults: {ttl: 3s, lease: 3s}\ncleanup_interval: off\n")
	for _, k := range []string{"c1", "c2", "c3"} {
		if r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", k); r.Status != 201 {
			t.Fatalf("%s: %d", k, r.Status)
		}
	}
	if err := g.stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, errOut, err := runIdem(t, "cleanup", "--store", "file:"+dir, "--dry-run")
		if err != nil {
			t.Fatalf("cleanup --dry-run: %v %s", err, errOut)
		}
		if strings.HasPrefix(out, "3 expired records") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 3 s records had not expired a minute later: %s", out)
		}
	}
	out, errOut, err := runIdem(t, "cleanup", "--store", "file:"+dir, "--batch", "2")
	if err != nil || !strings.Contains(out, "removed 3 expired records") {
		t.Fatalf("cleanup: %v %q %q", err, out, errOut)
	}
	// Not a terminal: progress comes as plain lines, one per batch.
	if !strings.Contains(errOut, "removed 2 expired records so far\nremoved 3 expired records so far\n") {
		t.Errorf("progress lines: %q", errOut)
	}
}

// TestTenants: two tenants with one key run once each and never see each
// other's response; a keyed request without a tenant is 401.
func TestTenants(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "tenant: {header: X-User-ID}\n")
	got := map[string]response{}
	for _, user := range []string{"alice", "bob"} {
		r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "shared-key", "X-User-ID", user)
		if r.Status != 201 || r.charge(t).User != user {
			t.Fatalf("%s: %d %s", user, r.Status, r.Body)
		}
		got[user] = r
	}
	if got["alice"].charge(t).ID == got["bob"].charge(t).ID {
		t.Error("both tenants got one charge")
	}
	for _, user := range []string{"alice", "bob", "alice"} {
		r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "shared-key", "X-User-ID", user)
		if !bytes.Equal(r.Body, got[user].Body) || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s's retry: %d %s", user, r.Status, r.Body)
		}
	}
	before := a.stats(t).Charges
	r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "shared-key")
	if r.Status != http.StatusUnauthorized {
		t.Fatalf("no tenant: %d %s", r.Status, r.Body)
	}
	r.problem(t)
	s := a.stats(t)
	if s.Charges != before {
		t.Error("the upstream ran for a keyed request without a tenant")
	}
	if s.Executions["alice/shared-key"] != 1 || s.Executions["bob/shared-key"] != 1 {
		t.Errorf("executions = %v", s.Executions)
	}
	// Keyless requests pass through without a tenant.
	if r := post(t, g.URL+"/charges", chargeBody); r.Status != 201 {
		t.Errorf("keyless without tenant: %d", r.Status)
	}
}

// TestGracefulShutdown: SIGTERM while a slow request runs lets it complete
// and record its outcome; after a restart on the same data, the retry
// replays it. The maintenance commands then read the same data.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	dir := t.TempDir()
	g := startGateway(t, a.URL, dir, "")
	// The slow call outlasts every check made during the shutdown by
	// seconds, so that none of them races it on a loaded machine.
	slow := make(chan response, 1)
	go func() {
		r, err := tryPost(context.Background(), g.URL+"/charges?delay=5s", chargeBody, "Idempotency-Key", "slow-1")
		if err != nil {
			r = response{Status: -1, Body: []byte(err.Error())}
		}
		slow <- r
	}()
	deadline := time.Now().Add(10 * time.Second)
	for a.stats(t).Executions["slow-1"] == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the slow request never reached the upstream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A connection that never sends a request must not hold up the
	// shutdown: http.Server.Shutdown alone closes it only once it is 5 s
	// old.
	idle, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	dialed := time.Now()
	idleClosed := make(chan time.Duration, 1)
	go func() {
		_ = idle.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := idle.Read(make([]byte, 1))
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			idleClosed <- -1
			return
		}
		idleClosed <- time.Since(dialed)
	}()
	stopped := make(chan error, 1)
	go func() { stopped <- g.stop(syscall.SIGTERM, 30*time.Second) }()

	// While draining, new connections are refused, and the slow call
	// goes on.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := (&http.Client{Timeout: time.Second}).Get(g.URL + "/stats")
		if err != nil {
			break
		}
		res.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("new requests were still accepted 10 s after SIGTERM")
		}
	}
	select {
	case r := <-slow:
		t.Fatalf("the slow call ended before new connections were refused: %d %s", r.Status, r.Body)
	default:
	}
	// The fresh idle connection is closed at once, not when it is 5 s
	// old (the only other way it closes).
	if d := <-idleClosed; d < 0 || d > 4500*time.Millisecond {
		t.Errorf("the idle connection was closed %v after it was opened: the shutdown waited for it", d)
	}
	r := <-slow
	if r.Status != 201 {
		t.Fatalf("in-flight request: %d %s", r.Status, r.Body)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("gateway exit: %v", err)
	}
	if !strings.Contains(g.output(), "idem gateway stopped") {
		t.Error("no clean stop in the log")
	}

	g2 := startGateway(t, a.URL, dir, "")
	again := post(t, g2.URL+"/charges?delay=5s", chargeBody, "Idempotency-Key", "slow-1")
	if again.Status != 201 || !bytes.Equal(again.Body, r.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry after restart: %d %s %v", again.Status, again.Body, again.Header)
	}
	if n := a.stats(t).Executions["slow-1"]; n != 1 {
		t.Errorf("executions = %d, want 1", n)
	}
	if err := g2.stop(syscall.SIGINT, 15*time.Second); err != nil {
		t.Fatalf("second gateway exit: %v", err)
	}

	// The maintenance commands on the gateway's data.
	out, errOut, err := runIdem(t, "inspect", "--store", "file:"+dir, "--key", "slow-1")
	if err != nil {
		t.Fatalf("inspect: %v %s", err, errOut)
	}
	var rec struct {
		Key, State string
		Response   struct {
			Status int
			Body   json.RawMessage
		}
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("inspect output %q: %v", out, err)
	}
	if rec.Key != "slow-1" || rec.State != "succeeded" || rec.Response.Status != 201 || !strings.Contains(string(rec.Response.Body), r.charge(t).ID) {
		t.Errorf("inspect = %s", out)
	}
	if _, errOut, err := runIdem(t, "inspect", "--store", "file:"+dir, "--key", "nope"); err == nil || !strings.Contains(errOut, "no live record") {
		t.Errorf("inspect of a missing key: %v %s", err, errOut)
	}
	if out, errOut, err := runIdem(t, "cleanup", "--store", "file:"+dir); err != nil || !strings.Contains(out, "removed 0 expired records") {
		t.Errorf("cleanup: %v %s %s", err, out, errOut)
	}
	if out, errOut, err := runIdem(t, "cleanup", "--store", "file:"+dir, "--dry-run"); err != nil || !strings.Contains(out, "0 expired records") {
		t.Errorf("cleanup --dry-run on a file store: %v %s %s", err, out, errOut)
	}
}

// TestClientHangUp: a client that gives up does not cancel the upstream
// call; its retry gets the recorded outcome, not a second execution.
func TestClientHangUp(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if _, err := tryPost(ctx, g.URL+"/charges?delay=600ms", chargeBody, "Idempotency-Key", "hangup-1"); err == nil {
		t.Fatal("the client did not time out")
	}
	deadline := time.Now().Add(30 * time.Second) // a generous bound: the call takes 600 ms
	for {
		r := post(t, g.URL+"/charges?delay=600ms", chargeBody, "Idempotency-Key", "hangup-1")
		if r.Status == 201 {
			if r.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry ran again: %v", r.Header)
			}
			break
		}
		if r.Status != 409 || time.Now().After(deadline) {
			t.Fatalf("retry: %d %s", r.Status, r.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := a.stats(t).Executions["hangup-1"]; n != 1 {
		t.Errorf("executions = %d, want 1", n)
	}
}

// TestUpstreamDown: with the upstream gone, a keyed request gets 502 and
// its key is free for the retry once the upstream is back.
func TestUpstreamDown(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "defaults: {profile: stripe}\n")
	a.kill()
	r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "down-1")
	if r.Status != http.StatusBadGateway {
		t.Fatalf("upstream down: %d %s", r.Status, r.Body)
	}
	if p := r.problem(t); p["idempotency_key"] != "down-1" {
		t.Errorf("problem = %v", p)
	}
	// Even the stripe profile, which caches every status, must not keep a
	// 502 for a request that never reached the upstream.
	r = post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "down-1")
	if r.Status != http.StatusBadGateway || r.Header.Get("Idempotent-Replayed") == "true" {
		t.Errorf("retry: %d %v", r.Status, r.Header)
	}
	res, err := http.Get(g.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Contains(m, []byte(`idem_upstream_errors_total{kind="unreachable"} 2`)) {
		t.Errorf("/metrics does not count the unreachable upstream")
	}
}

// TestKeepHeadersFormerName: a config file giving keep_headers, the
// former name of replay_headers, still starts the gateway, whose replays
// repeat those headers, with a warning at start naming the new key.
func TestKeepHeadersFormerName(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "keep_headers: [X-Charge-Count]\n")
	first := post(t, g.URL+"/charges?status=409", chargeBody, "Idempotency-Key", "former-409")
	again := post(t, g.URL+"/charges?status=409", chargeBody, "Idempotency-Key", "former-409")
	if c := again.Header.Get("X-Charge-Count"); again.Header.Get("Idempotent-Replayed") != "true" || c == "" || c != first.Header.Get("X-Charge-Count") {
		t.Errorf("keep_headers: replayed %v X-Charge-Count %q, first %q", again.Header.Get("Idempotent-Replayed"), c, first.Header.Get("X-Charge-Count"))
	}
	var warned bool
	for _, line := range strings.Split(g.output(), "\n") {
		var m struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &m) == nil && m.Level == "WARN" && strings.Contains(m.Msg, "keep_headers is now replay_headers") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning naming replay_headers at start:\n%s", g.output())
	}
}

// TestConfigErrors: a bad file stops `idem serve` with a message naming the
// mistake, before anything listens.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"upstream: http://127.0.0.1:1\nlisen: :8080\n", `line 2: unknown field "lisen"`},
		{"upstream: http://127.0.0.1:1\ndefaults: {on_failure: maybe}\n", `on_failure "maybe"`},
		{"upstream: http://127.0.0.1:1\nstore: mysql://x\n", "unknown store DSN"},
		{"upstream: http://127.0.0.1:1\nkeep_headers: [X-A]\nreplay_headers: [X-B]\n", "keep_headers and replay_headers are both set"},
	} {
		f := t.TempDir() + "/idem.yaml"
		if err := writeFile(f, tc.yaml); err != nil {
			t.Fatal(err)
		}
		_, errOut, err := runIdem(t, "serve", "--config", f)
		if err == nil || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: %v, stderr %q; want %q", tc.yaml, err, errOut, tc.want)
		}
	}
	if _, errOut, err := runIdem(t, "serve", "--listen", "127.0.0.1:0"); err == nil || !strings.Contains(errOut, "upstream is required") {
		t.Errorf("no upstream: %v %s", err, errOut)
	}
	if out, _, err := runIdem(t, "version"); err != nil || !strings.HasPrefix(out, "idem ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: %q %v", out, err)
	}
	if _, errOut, err := runIdem(t, "frobnicate"); err == nil || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %v %s", err, errOut)
	}
}
