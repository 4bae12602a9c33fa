package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit/tmpdisk"
	"github.com/idem-dev/idem/seal"
)

// The gateway, in front of the demo API over TCP, through a replay, a 422,
// a 409 in_progress, an upstream cut off (outcome unknown) and an
// operator's release, logs no raw key and no raw tenant (the X-User-ID
// value) in any record at Info or above. Fails where the 409 in_progress
// line carries both.
func TestGatewayLogsCarryNoRawKeyOrTenant(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	const token = "privacy-test-admin-token-0123"
	g := startGateway(t, a.URL, t.TempDir(), "tenant: {header: X-User-ID}\nadmin_token: "+token+
		"\nupstream_timeout: 2s\nupstream_deadline: 3s\n")
	const tenant = "tenant-raw-5c2eb00c"
	var keys []string
	key := func(name string) string {
		k := "rawkey-" + name + "-71d3"
		keys = append(keys, k)
		return k
	}
	send := func(path, k, body string) response {
		return post(t, g.URL+path, body, "Idempotency-Key", k, "X-User-ID", tenant)
	}

	k := key("replayed")
	if r := send("/charges", k, chargeBody); r.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	if r := send("/charges", k, chargeBody); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	if r := send("/charges", k, `{"amount":1,"currency":"eur"}`); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("another body: %d %s", r.Status, r.Body)
	}

	// Two calls with one key while the first takes a second: one of
	// them is answered 409 in_progress.
	k = key("inprogress")
	var wg sync.WaitGroup
	got := make([]response, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = send("/charges?delay=1s", k, chargeBody)
		}()
	}
	wg.Wait()
	if got[0].Status+got[1].Status != http.StatusCreated+http.StatusConflict {
		t.Fatalf("two calls at once: %d and %d, want 201 and 409", got[0].Status, got[1].Status)
	}

	// A call the upstream does not answer within upstream_deadline has an
	// unknown outcome; an operator releases its key.
	k = key("released")
	if r := send("/charges?delay=10s", k, chargeBody); r.Status != http.StatusGatewayTimeout {
		t.Fatalf("slow call: %d %s", r.Status, r.Body)
	}
	var released bool
	for range 100 { // the call is cut off a second after the 504
		if r := send("/charges?delay=10s", k, chargeBody); r.Status == http.StatusConflict && r.problem(t)["conflict_type"] == "outcome_unknown" {
			q := url.Values{"scope": {tenant}, "key": {k}}
			req, _ := http.NewRequest("POST", g.Admin+"/api/keys/release?"+q.Encode(), nil)
			req.Header.Set("Authorization", "Bearer "+token)
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("release: %d", res.StatusCode)
			}
			released = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !released {
		t.Fatal("the cut-off call never became outcome_unknown")
	}

	if err := g.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var high []string
	for _, line := range strings.Split(g.output(), "\n") {
		var m struct{ Level string }
		if json.Unmarshal([]byte(line), &m) != nil {
			continue // not a log record (a panic would be, and fail below)
		}
		var lvl slog.Level
		if lvl.UnmarshalText([]byte(m.Level)) == nil && lvl >= slog.LevelInfo {
			high = append(high, line)
		}
	}
	all := strings.Join(high, "\n")
	if !strings.Contains(all, `"conflict_type":"in_progress"`) || !strings.Contains(all, "released by an operator") {
		t.Fatalf("the logs lack the conflict or the release; the test cannot tell:\n%s", all)
	}
	for _, line := range high {
		for _, k := range keys {
			if strings.Contains(line, k) {
				t.Errorf("raw key %s in a record at Info or above: %s", k, line)
			}
		}
		if strings.Contains(line, tenant) {
			t.Errorf("raw tenant in a record at Info or above: %s", line)
		}
	}
}

// Through the gateway, a tenant past max_keys_per_tenant gets 429
// too_many_keys in problem+json with Retry-After, and nothing runs, while
// another tenant still gets 201; the refusal is counted by kind.
func TestGatewayMaxKeysPerTenant(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "tenant: {header: X-User-ID}\nmax_keys_per_tenant: 2\n")
	as := func(user, key string) response {
		return post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", key, "X-User-ID", user)
	}
	for _, k := range []string{"k1", "k2"} {
		if r := as("alice", k); r.Status != http.StatusCreated {
			t.Fatalf("alice %s: %d %s", k, r.Status, r.Body)
		}
	}
	r := as("alice", "k3")
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("alice past her cap: %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if p := r.problem(t); !strings.HasSuffix(p["type"].(string), "#too_many_keys") {
		t.Errorf("problem type %v", p["type"])
	}
	if r := as("alice", "k1"); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("alice's retry of k1: %d replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	if r := as("bob", "k3"); r.Status != http.StatusCreated {
		t.Errorf("bob: %d %s", r.Status, r.Body)
	}
	if s := a.stats(t); s.Executions["alice/k3"] != 0 || s.Executions["bob/k3"] != 1 {
		t.Errorf("executions %v", s.Executions)
	}
	res, err := http.Get(g.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(b), `idem_rejections_total{kind="too_many_keys",route="/"} 1`) {
		t.Errorf("no refusal counted:\n%s", grepLines(string(b), "idem_rejections_total"))
	}
}

// The hashes the gateway logs are keyed by its secret's print key, and
// unkeyed without one, which the start-up log warns about; the secret
// changes what is printed, never the scope: with or without it, the
// admin API finds the record under the tenant itself.
func TestGatewayLogsKeyedHashes(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	ring, err := seal.ParseKeyring(gwSecretOld)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"", gwSecretOld} {
		var env []string
		want := idem.Redactor{}
		if secret != "" {
			env, want = []string{"IDEM_SECRET=" + secret}, idem.Redactor{MAC: ring.PrintMAC}
		}
		const token = "keyed-hashes-admin-token-0123"
		g := startGatewayEnv(t, env, a.URL, t.TempDir(), "tenant: {header: X-User-ID}\nadmin_token: "+token+"\n")
		key := "keyed-" + strconv.Itoa(len(secret))
		send := func(body string) response {
			return post(t, g.URL+"/charges", body, "Idempotency-Key", key, "X-User-ID", "alice")
		}
		send(chargeBody)
		if r := send(`{"amount":1,"currency":"eur"}`); r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("another body: %d %s", r.Status, r.Body)
		}
		req, _ := http.NewRequest("GET", g.Admin+"/api/keys?"+url.Values{"scope": {"alice"}, "key": {key}}.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("secret %v: no record under the scope \"alice\": %d", secret != "", res.StatusCode)
		}
		if err := g.stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		out := g.output()
		var conflict struct{ ScopeHash, KeyHash string }
		for _, line := range strings.Split(out, "\n") {
			var m struct {
				Msg       string `json:"msg"`
				ScopeHash string `json:"scope_hash"`
				KeyHash   string `json:"key_hash"`
			}
			if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "idem: conflict" {
				conflict.ScopeHash, conflict.KeyHash = m.ScopeHash, m.KeyHash
			}
		}
		if conflict.ScopeHash != want.Scope("alice") || conflict.KeyHash != want.Key("alice", key) {
			t.Errorf("secret %v: the conflict logged %+v, want %s %s", secret != "", conflict, want.Scope("alice"), want.Key("alice", key))
		}
		if warned := strings.Contains(out, "can check a guessed tenant, credential or key"); warned != (secret == "") {
			t.Errorf("secret %v: warned of unkeyed hashes %v", secret != "", warned)
		}
	}
}

// The gateway on a file store whose disk fills, then frees: the store's
// refusals (503, outcomes kept in memory, then written) are logged without
// a raw key or tenant at Info or above.
func TestGatewayStoreFailureLogsNoRawKey(t *testing.T) {
	t.Parallel()
	disk := tmpdisk.Mount(t, "8m")
	a := startAPI(t)
	g := startGateway(t, a.URL, filepath.Join(disk, "store"), "tenant: {header: X-User-ID}\n")
	const tenant = "tenant-raw-d15cf011"
	var keys []string
	send := func(k string) response {
		return post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", k, "X-User-ID", tenant)
	}
	keys = append(keys, "rawkey-before-0aa1")
	if r := send(keys[0]); r.Status != http.StatusCreated {
		t.Fatalf("before the disk fills: %d %s", r.Status, r.Body)
	}
	ballast := filepath.Join(disk, "ballast")
	tmpdisk.Ballast(t, ballast, 0)
	refused := 0
	for i := 0; i < 200 && refused < 3; i++ {
		k := "rawkey-full-" + strconv.Itoa(i) + "-0aa1"
		keys = append(keys, k)
		if r := send(k); r.Status == http.StatusServiceUnavailable {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("the full disk refused nothing: the test cannot tell")
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ { // bounded: the disk has room again
		k := "rawkey-after-" + strconv.Itoa(i) + "-0aa1"
		keys = append(keys, k)
		if r := send(k); r.Status == http.StatusCreated {
			break
		} else if i == 200 {
			t.Fatalf("no key recorded after the disk freed: %d %s", r.Status, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := g.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var high []string
	for _, line := range strings.Split(g.output(), "\n") {
		var m struct{ Level string }
		var lvl slog.Level
		if json.Unmarshal([]byte(line), &m) == nil && lvl.UnmarshalText([]byte(m.Level)) == nil && lvl >= slog.LevelInfo {
			high = append(high, line)
		}
	}
	if all := strings.Join(high, "\n"); !strings.Contains(all, `"msg":"idem: store full"`) && !strings.Contains(all, "kept in memory") {
		t.Fatalf("no line tells of the store's refusal; the test cannot tell:\n%s", all)
	}
	t.Logf("%d refusals, %d lines at Info and above", refused, len(high))
	for _, line := range high {
		for _, k := range keys {
			if strings.Contains(line, k) {
				t.Errorf("raw key %s at Info or above: %s", k, line)
			}
		}
		if strings.Contains(line, tenant) {
			t.Errorf("raw tenant at Info or above: %s", line)
		}
	}
}
