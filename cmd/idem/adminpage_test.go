package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// adminPageDir holds the browser test's Node package (playwright-core,
// installed by scripts/admin-ui-deps.sh) and, gitignored, its screenshots.
const adminPageDir = "testdata/adminpage"

// browserTools returns the node and chromium paths, or marks the test
// unavailable (a failure under CI=true).
func browserTools(t *testing.T) (node, chromium string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Unavailable(t, "node is not installed (run scripts/test-deps.sh)")
	}
	chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		testenv.Unavailable(t, "%s is not installed (run scripts/test-deps.sh)", chromium)
	}
	if _, err := os.Stat(filepath.Join(adminPageDir, "node_modules", "playwright-core")); err != nil {
		testenv.Unavailable(t, "playwright-core is not installed in %s (run scripts/admin-ui-deps.sh)", adminPageDir)
	}
	return node, chromium
}

// TestAdminPageBrowser: an operator's session on the admin page, in
// headless Chromium, while load runs: the page asks for the token, shows
// live rates of executions, replays and conflicts and the store's latency,
// lists a key left in progress by a gateway that was killed, inspects it
// and releases it; the next request with that key then runs again.
// Screenshots go to testdata/adminpage/screenshots.
func TestAdminPageBrowser(t *testing.T) {
	t.Parallel()
	node, chromium := browserTools(t)
	a := startAPI(t)
	dir := t.TempDir()
	const token = "s3cret-admin-token"
	yaml := "admin_token: " + token + "\ndefaults: {lease: 2s, ttl: 1h}\n"

	// A gateway killed while it holds "stuck-1": its record stays in
	// progress until its lease ends, and nobody knows whether the charge
	// went through.
	g1 := startGateway(t, a.URL, dir, yaml)
	go tryPost(context.Background(), g1.URL+"/charges?delay=20s", chargeBody, "Idempotency-Key", "stuck-1")
	go tryPost(context.Background(), g1.URL+"/charges?delay=20s", chargeBody, "Idempotency-Key", "stuck-2")
	deadline := time.Now().Add(10 * time.Second)
	for st := a.stats(t); st.Executions["stuck-1"] == 0 || st.Executions["stuck-2"] == 0; st = a.stats(t) {
		if time.Now().After(deadline) {
			t.Fatal("stuck-1 never reached the upstream")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The gateway's store (OneSync) keeps a first call's reservation in
	// memory for at most 50 ms (file.Options.HoldFor's default), then
	// writes it, so that a kill during a slow call leaves the key in
	// progress: the stuck keys' reservations are written once that bound
	// and the sweep's half-bound tick have passed. 200 ms is that with
	// room for a loaded machine; no other call is made meanwhile, so
	// nothing else could have written them.
	time.Sleep(200 * time.Millisecond)
	g1.kill()

	g := startGateway(t, a.URL, dir, yaml)
	time.Sleep(2100 * time.Millisecond) // the dead holder's lease ends

	// Load: executions, replays and conflicts, bounded by ctx and by time.
	ctx, stop := context.WithTimeout(context.Background(), 90*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprintf("load-%d-%d", w, i)
				tryPost(ctx, g.URL+"/charges", chargeBody, "Idempotency-Key", k) // runs
				tryPost(ctx, g.URL+"/charges", chargeBody, "Idempotency-Key", k) // replays
				// Two at once on a slow call: one runs, one gets 409.
				testkit.FanOut(2, func(int) {
					tryPost(ctx, g.URL+"/charges?delay=150ms", chargeBody, "Idempotency-Key", k+"-race")
				})
				if w == 0 && i == 0 {
					// Once: a retry that runs into the dead holder's key
					// with another body is refused, and the key is listed.
					tryPost(ctx, g.URL+"/charges", `{"amount":5,"currency":"eur"}`, "Idempotency-Key", "stuck-1")
				}
				sent.Add(4)
			}
		}()
	}

	shots, err := filepath.Abs(filepath.Join(adminPageDir, "screenshots"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, "admin.test.mjs")
	cmd.Dir = adminPageDir
	cmd.Env = append(os.Environ(), "ADMIN_URL="+g.Admin, "ADMIN_TOKEN="+token, "STUCK_KEY=stuck-1",
		"SHOTS="+shots, "CHROMIUM="+chromium)
	testkit.DieWithParent(cmd)
	out, err := cmd.Output()
	stop()
	wg.Wait()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += "\n" + string(ee.Stderr)
		}
		t.Fatalf("browser session: %s\nstdout: %s", msg, out)
	}
	var seen struct {
		WrongToken    string
		First, Second struct {
			Executions, Replays, Conflicts, StoreMean, StoreP99, Status string
			TotalExecutions, InProgress, OutcomeUnknown                 int
		}
		Inspected struct {
			Key, State     string
			Stale          bool
			OutcomeUnknown bool `json:"outcome_unknown"`
		}
		InspectMsg, ReleaseMsg, AfterRelease string
		Errors                               []string
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("browser output %q: %v", out, err)
	}
	t.Logf("sent %d requests; the page read %+v, then %+v", sent.Load(), seen.First, seen.Second)
	t.Logf("screenshots in %s", shots)
	if !strings.Contains(seen.WrongToken, "token") {
		t.Errorf("a wrong token: %q", seen.WrongToken)
	}
	if seen.Second.TotalExecutions <= seen.First.TotalExecutions || seen.Second.OutcomeUnknown < 1 {
		t.Errorf("numbers did not move: %+v then %+v", seen.First, seen.Second)
	}
	if seen.Inspected.Key != "stuck-1" || seen.Inspected.State != "in_progress" || !seen.Inspected.Stale || !seen.Inspected.OutcomeUnknown {
		t.Errorf("inspected %+v", seen.Inspected)
	}
	if !strings.Contains(seen.InspectMsg, "Outcome unknown") || !strings.Contains(seen.ReleaseMsg, "Released stuck-1") ||
		!strings.Contains(seen.AfterRelease, "no live record") {
		t.Errorf("messages: %q / %q / %q", seen.InspectMsg, seen.ReleaseMsg, seen.AfterRelease)
	}
	if len(seen.Errors) > 0 {
		t.Errorf("errors in the page: %q", seen.Errors)
	}
	for _, f := range []string{"1-login.png", "2-dashboard-under-load.png", "3-inspect-stuck-key.png", "4-released.png"} {
		if st, err := os.Stat(filepath.Join(shots, f)); err != nil || st.Size() < 1000 {
			t.Errorf("screenshot %s: %v", f, err)
		}
	}
	// Released: the next request with the key runs the charge again.
	if r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "stuck-1"); r.Status != 201 || r.Header.Get("Idempotent-Replayed") == "true" {
		t.Errorf("after release: %d %v", r.Status, r.Header)
	}
	if n := a.stats(t).Executions["stuck-1"]; n != 2 {
		t.Errorf("stuck-1 ran %d times, want 2 (the lost one, then after release)", n)
	}
	// The other one, from the command line.
	relOut, errOut, err := runIdem(t, "release", "--admin", g.Admin, "--admin-token", token, "--key", "stuck-2")
	if err != nil || relOut != "released key \"stuck-2\" (scope \"\"): its next request runs the operation again\n" {
		t.Errorf("idem release: %v %q %q", err, relOut, errOut)
	}
	if _, errOut, err := runIdem(t, "release", "--admin", g.Admin, "--admin-token", token, "--key", "stuck-2"); err == nil ||
		!strings.Contains(errOut, "404 Not Found: no live record for this scope and key: nothing to release") {
		t.Errorf("idem release twice: %v %q", err, errOut)
	}
}
