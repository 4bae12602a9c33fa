package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/file"
)

func getStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestDrainDelay: on SIGTERM with drain_delay, /readyz answers 503 at once
// while the proxy keeps serving; only after the delay does the listener
// close, and the gateway then exits cleanly.
func TestDrainDelay(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	// The checks below run during the delay: 6 s leaves them seconds of
	// margin on a loaded machine (with 1.5 s, a slow readiness poll and
	// request could outlast it).
	g := startGateway(t, a.URL, t.TempDir(), "", "--drain-delay", "6s")
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := getStatus(t, g.Admin+"/readyz")
		if code == 503 && strings.Contains(body, "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after SIGTERM: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _ := getStatus(t, g.Admin+"/healthz"); code != 200 {
		t.Errorf("/healthz while draining = %d, want 200 (still alive)", code)
	}
	// The load balancer has not noticed yet: its requests still work,
	// on new connections too.
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("POST", g.URL+"/charges", strings.NewReader(chargeBody))
	req.Header.Set("Idempotency-Key", "during-drain")
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("a request during the drain delay: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Errorf("a request during the drain delay: %d", res.StatusCode)
	}
	select {
	case <-g.done:
		t.Fatal("exited during the drain delay")
	default:
	}
	select {
	case <-g.done:
	case <-time.After(15 * time.Second):
		t.Fatal("did not exit after the drain delay")
	}
	if g.err != nil {
		t.Errorf("exit: %v", g.err)
	}
	if !strings.Contains(g.output(), "idem: draining") || !strings.Contains(g.output(), "idem gateway stopped") {
		t.Errorf("log:\n%s", g.output())
	}
}

// TestReadiness: /readyz follows the upstream (and the store); /healthz
// stays 200, so that a supervisor does not restart a gateway whose
// upstream is down.
func TestReadiness(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, t.TempDir(), "")
	if code, body := getStatus(t, g.Admin+"/readyz"); code != 200 || !strings.Contains(body, `"upstream": "ok"`) {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	if code, body := getStatus(t, g.Admin+"/metrics"); code != 200 || !strings.Contains(body, "\nidem_keys_in_progress 0\n") {
		t.Errorf("/metrics lacks idem_keys_in_progress: %d", code)
	}
	a.kill()
	code, body := getStatus(t, g.Admin+"/readyz")
	if code != 503 || !strings.Contains(body, "upstream unavailable") || strings.Contains(body, "cannot connect to") {
		t.Errorf("/readyz with the upstream down = %d %s, want the reason without the raw error (no token)", code, body)
	}
	if code, _ := getStatus(t, g.Admin+"/healthz"); code != 200 {
		t.Errorf("/healthz with the upstream down = %d", code)
	}
	// A gateway in front of a shared upstream is probed with
	// ?upstream=report: ready on its own store, the upstream reported.
	if code, body := getStatus(t, g.Admin+"/readyz?upstream=report"); code != 200 || !strings.Contains(body, "upstream unavailable") || !strings.Contains(body, `"store": "ok"`) {
		t.Errorf("/readyz?upstream=report with the upstream down = %d %s", code, body)
	}

	// upstream_ready: a path the upstream must answer below 500.
	b := startAPI(t)
	g2 := startGateway(t, b.URL, t.TempDir(), "upstream_ready: /stats\n")
	if code, body := getStatus(t, g2.Admin+"/readyz"); code != 200 {
		t.Errorf("/readyz with upstream_ready: /stats = %d %s", code, body)
	}
}

// TestMetricsFromTheStart: a fresh gateway's /metrics has every labelled
// series of its routes at 0 before any request, so that the first unknown
// outcome or unprotected request is an increase that alerts fire on.
func TestMetricsFromTheStart(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	g := startGateway(t, a.URL, "", "routes:\n  - match: \"POST /charges\"\n  - match: \"PUT /charges/{id}\"\n", "--store", "memory:")
	code, m := getStatus(t, g.Admin+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		`idem_rejections_total{kind="outcome_unknown",route="POST /charges"} 0`,
		`idem_rejections_total{kind="outcome_unknown",route="PUT /charges/{id}"} 0`,
		`idem_unprotected_total{route="POST /charges"} 0`,
		`idem_unprotected_total{route="PUT /charges/{id}"} 0`,
		`idem_conflicts_total{conflict_type="payload_mismatch",route="POST /charges"} 0`,
		`idem_executions_total{code="2xx",route="POST /charges"} 0`,
		`idem_replays_total{code="2xx",route="PUT /charges/{id}"} 0`,
		`idem_pass_throughs_total{route=""} 0`,
		`idem_upstream_errors_total{kind="unreachable"} 0`,
		`idem_store_operation_duration_seconds_count{operation="complete",result="lease_lost"} 0`,
		`idem_store_operation_duration_seconds_count{operation="reserve",result="error"} 0`,
		"idem_reservations_freed_total 0",
		"idem_store_records_lost_total 0",
	} {
		if !strings.Contains(m, "\n"+want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestAdminCommands: while a gateway holds its file store, cleanup and
// inspect refuse to open it and say how to go through the gateway, and do
// so with --admin; release refuses a key whose outcome is known.
//
// No step depends on a short lifetime being met: the records cleanup
// removes were written by an earlier gateway with a 3 s TTL, and the test
// waits until the dry run counts them; the ones it inspects live an hour.
// (Written with a 2 s TTL for all, the records expired before the dry run
// that wanted none expired on a loaded machine.)
func TestAdminCommands(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	dir := t.TempDir()
	const token = "tok-admin-0123456789"
	short := startGateway(t, a.URL, dir, "defaults: {ttl: 3s, lease: 3s}\ncleanup_interval: off\n")
	for _, k := range []string{"exp-1", "exp-2", "exp-3"} {
		if r := post(t, short.URL+"/charges", chargeBody, "Idempotency-Key", k); r.Status != 201 {
			t.Fatal(r.Status)
		}
	}
	if err := short.stop(syscall.SIGTERM, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, a.URL, dir, "admin_token: "+token+"\ndefaults: {ttl: 1h}\ncleanup_interval: off\n")
	for _, k := range []string{"adm-1", "adm-2", "adm-3"} {
		if r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", k); r.Status != 201 {
			t.Fatal(r.Status)
		}
	}
	_, errOut, err := runIdem(t, "inspect", "--store", "file:"+dir, "--key", "adm-1")
	if exitCode(t, err) != 1 || !strings.Contains(errOut, "work through the gateway instead (--admin http://ITS_ADMIN_LISTEN with its admin_token)") {
		t.Errorf("inspect of a locked store: %v %s", err, errOut)
	}
	out, errOut, err := runIdem(t, "inspect", "--admin", g.Admin, "--admin-token", token, "--key", "adm-1")
	if err != nil || !strings.Contains(out, `"key": "adm-1"`) || !strings.Contains(out, `"state": "succeeded"`) {
		t.Errorf("inspect --admin: %v %s %s", err, out, errOut)
	}
	if _, errOut, err := runIdem(t, "inspect", "--admin", g.Admin, "--admin-token", "wrong", "--key", "adm-1"); err == nil ||
		!strings.Contains(errOut, "401 Unauthorized: a valid admin token is required") {
		t.Errorf("inspect with a wrong token: %v %s", err, errOut)
	}
	if _, errOut, err := runIdem(t, "inspect", "--admin", g.Admin, "--admin-token", token, "--key", "nope"); err == nil ||
		!strings.Contains(errOut, `no live record for scope "" and key "nope" in the gateway at `+g.Admin) {
		t.Errorf("inspect of a missing key: %v %s", err, errOut)
	}
	if _, errOut, err := runIdem(t, "release", "--admin", g.Admin, "--admin-token", token, "--key", "adm-1"); err == nil ||
		!strings.Contains(errOut, "409 Conflict: the key's outcome is known") {
		t.Errorf("release of a succeeded key: %v %s", err, errOut)
	}
	// The dry run counts the expired records, and removes none: it counts
	// them again until all three have expired, and cleanup then removes
	// all three.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, errOut, err = runIdem(t, "cleanup", "--admin", g.Admin, "--admin-token", token, "--dry-run")
		if err != nil || !regexp.MustCompile(`^[0-3] expired records in the gateway at `).MatchString(out) {
			t.Fatalf("cleanup --dry-run --admin: %v %s %s", err, out, errOut)
		}
		if strings.HasPrefix(out, "3 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 3 s records had not expired a minute later: %s", out)
		}
	}
	out, errOut, err = runIdem(t, "cleanup", "--admin", g.Admin, "--admin-token", token, "--batch", "2")
	if err != nil || !strings.Contains(out, "removed 3 expired records through the gateway at "+g.Admin) ||
		!strings.Contains(errOut, "removed 2 expired records so far\nremoved 3 expired records so far\n") {
		t.Errorf("cleanup --admin: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	// The live records are still there.
	if out, errOut, err := runIdem(t, "inspect", "--admin", g.Admin, "--admin-token", token, "--key", "adm-3"); err != nil || !strings.Contains(out, `"state": "succeeded"`) {
		t.Errorf("inspect after cleanup: %v %s %s", err, out, errOut)
	}
}

// TestCleanupProgressTerminal: on a real terminal (tmux), cleanup's
// progress is one line rewritten in place, ended by a newline before the
// summary.
func TestCleanupProgressTerminal(t *testing.T) {
	t.Parallel()
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		testenv.Unavailable(t, "tmux is not installed (run scripts/test-deps.sh)")
	}
	dir := t.TempDir()
	// Written by a store whose clock started two hours ago, with an hour
	// to live: expired when the store is opened again now.
	s, err := file.Open(dir, file.Options{WallClock: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 7 {
		k := "tty-" + string(rune('a'+i))
		rec := store.Record{KeyHash: store.HashKey("", k), Key: k, State: store.InProgress, Token: uint64(i + 1)}
		if r, err := s.Reserve(ctx, store.ReserveRequest{Record: rec, Lease: time.Minute, TTL: time.Hour}); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	session := "idem-test-" + filepath.Base(dir)
	done := filepath.Join(t.TempDir(), "done")
	// The status goes to done by a rename, so that the test never reads
	// the file between the shell creating it and echo writing to it.
	script := idemBin + " cleanup --store file:" + dir + " --batch 3; echo \"exit=$?\" > " + done + ".tmp; mv " + done + ".tmp " + done + "; sleep 30"
	cmd := exec.Command(tmux, "-L", session, "new-session", "-d", "-s", session, "-x", "120", "-y", "20", "sh", "-c", script)
	cmd.Env = append(childEnv(), "TERM=xterm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(tmux, "-L", session, "kill-server").Run() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(done); err == nil && strings.TrimSpace(string(b)) == "exit=0" {
			break
		} else if err == nil {
			t.Fatalf("cleanup in tmux: %s", b)
		}
		if time.Now().After(deadline) {
			t.Fatal("cleanup did not finish in tmux")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pane, err := exec.Command(tmux, "-L", session, "capture-pane", "-p", "-t", session).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(pane), "\n"), "\n")
	t.Logf("the terminal shows:\n%s", pane)
	if len(lines) != 2 || strings.TrimRight(lines[0], " ") != "removed 7 expired records..." ||
		!strings.HasPrefix(lines[1], "removed 7 expired records from file:"+dir+" in ") {
		t.Errorf("terminal:\n%q", lines)
	}
	if strings.Contains(string(pane), "so far") {
		t.Error("line-per-batch progress on a terminal")
	}
}

// TestAdminListenerWarning: an admin listener reachable from other hosts
// without a token is named at start, with what to do; with a token, or on
// loopback, nothing is said.
func TestAdminListenerWarning(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	const warning = "is reachable from other hosts and has no admin_token"
	g := startGateway(t, a.URL, "", "", "--store", "memory:", "--admin-listen", "0.0.0.0:0")
	if !strings.Contains(g.output(), warning) || !strings.Contains(g.output(), `"level":"WARN"`) {
		t.Errorf("no warning for 0.0.0.0 without a token:\n%s", g.output())
	}
	if code, _ := getStatus(t, g.Admin+"/debug/pprof/"); code != 404 {
		t.Errorf("pprof without a token = %d, want 404 (off)", code)
	}
	g2 := startGateway(t, a.URL, "", "admin_token: t0k-0123456789abcdef\n", "--store", "memory:", "--admin-listen", "0.0.0.0:0")
	g3 := startGateway(t, a.URL, "", "", "--store", "memory:")
	for _, g := range []*gw{g2, g3} {
		if strings.Contains(g.output(), warning) {
			t.Errorf("a warning with a token or on loopback:\n%s", g.output())
		}
	}
}
