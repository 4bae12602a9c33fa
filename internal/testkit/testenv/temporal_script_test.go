package testenv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeTemporal is a stand-in for the Temporal CLI in scripts/temporal.sh's
// cache: `server start-dev` runs until SIGTERM and marks itself up in the
// directory FAKE_DIR; `operator cluster health` says SERVING while it is.
const fakeTemporal = `#!/usr/bin/env bash
case "$1 $2" in
"operator cluster") [[ -f $FAKE_DIR/up ]] && echo SERVING ;;
"server start-dev")
	trap 'rm -f "$FAKE_DIR/up"; exit 0' TERM
	echo $$ >"$FAKE_DIR/up"
	while :; do sleep 0.05; done ;;
esac
`

// TestTemporalScriptRun: `scripts/temporal.sh run CMD` (how make test runs
// trigger/temporal's tests) stops the dev server it started once CMD ends,
// also when CMD fails, and exits with CMD's status; a server that already
// answered is used, left running, and said so. Before, make test started
// the server in test-deps and left it running on 7233 without a word.
func TestTemporalScriptRun(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("../../../scripts/temporal.sh")
	if err != nil {
		t.Fatal(err)
	}
	cache, fake := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	version := regexp.MustCompile(`(?m)^VERSION=(\S+)$`).FindSubmatch(src)
	if version == nil {
		t.Fatal("no VERSION= in scripts/temporal.sh")
	}
	for name, body := range map[string]string{"temporal": fakeTemporal, "temporal.version": string(version[1]) + "\n"} {
		if err := os.WriteFile(filepath.Join(cache, "bin", name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), "IDEM_CACHE_DIR="+cache, "FAKE_DIR="+fake, "IDEM_TEMPORAL_PORT=17233")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	up := func() bool { _, err := os.Stat(filepath.Join(fake, "up")); return err == nil }
	// stopped waits for the fake server to be gone (the script waits for
	// it too; this only guards against reading a half-written state).
	stopped := func() bool {
		for deadline := time.Now().Add(10 * time.Second); up(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				return false
			}
		}
		return true
	}

	out, code := run("run", "sh", "-c", `test -f "$FAKE_DIR/up" && echo ran`)
	if code != 0 || !strings.Contains(out, "ran") || !strings.Contains(out, "stopped pid") || !stopped() {
		t.Errorf("run with no server: exit %d, up after: %v\n%s", code, up(), out)
	}
	out, code = run("run", "sh", "-c", "exit 3")
	if code != 3 || !strings.Contains(out, "stopped pid") || !stopped() {
		t.Errorf("run of a failing command: exit %d (want 3), up after: %v\n%s", code, up(), out)
	}

	// A server that was up before is used and left up, and said so.
	if out, code := run("start"); code != 0 || !up() {
		t.Fatalf("start: exit %d\n%s", code, out)
	}
	t.Cleanup(func() { run("stop") })
	out, code = run("run", "true")
	if code != 0 || !up() || !strings.Contains(out, "left running") {
		t.Errorf("run with a server up: exit %d, up after: %v\n%s", code, up(), out)
	}
	if out, code := run("stop"); code != 0 || !stopped() {
		t.Errorf("stop: exit %d\n%s", code, out)
	}
}

// TestMakeTestLeavesNoTemporal: make test's recipe runs trigger/temporal's
// tests under scripts/temporal.sh run, and test-deps no longer starts a
// server that nothing stops.
func TestMakeTestLeavesNoTemporal(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\tcd trigger/temporal && .*scripts/temporal\.sh run \$\(GO\) test `).Match(mk) {
		t.Error("make test does not run trigger/temporal's tests under scripts/temporal.sh run")
	}
	deps, err := os.ReadFile("../../../scripts/test-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?m)^[^#]*temporal\.sh start`).Match(deps) {
		t.Error("scripts/test-deps.sh starts the Temporal dev server, which nothing then stops")
	}
}
