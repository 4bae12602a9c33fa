package testenv_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// childEnv makes a re-executed test binary the child of TestUnreachable.
const childEnv = "IDEM_TESTENV_CHILD"

// TestUnreachable: a service that cannot be reached skips the test on a
// developer's machine and fails it under CI=true, so that CI never passes
// by skipping. The child asks for a Redis server that is not there.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	if os.Getenv(childEnv) != "" {
		testenv.Redis(t)
		t.Log("went on") // not reached: Redis skips or fails the test
		return
	}
	for _, tc := range []struct {
		ci       string
		fails    bool
		contains string
	}{
		{"", false, "--- SKIP: TestUnreachable "},
		{"true", true, "CI=true and IDEM_TEST_REDIS (redis://127.0.0.1:1/0) is unreachable"},
		{"1", true, "--- FAIL: TestUnreachable "},
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestUnreachable$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"=1", "CI="+tc.ci, "IDEM_TEST_REDIS=redis://127.0.0.1:1/0")
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.fails || !strings.Contains(string(out), tc.contains) {
				t.Fatalf("child failed=%v (%v), want %v and %q in:\n%s", failed, err, tc.fails, tc.contains, out)
			}
			if strings.Contains(string(out), "went on") {
				t.Fatalf("the test went on without its service:\n%s", out)
			}
		})
	}
}

// TestDefaults: without IDEM_TEST_* the local servers are used, and a DSN
// without a port is dialled on the service's port. Needs the local Redis.
func TestDefaults(t *testing.T) {
	t.Setenv("IDEM_TEST_REDIS", "")
	if got := testenv.Redis(t); got != testenv.DefaultRedis {
		t.Fatalf("Redis() = %q, want the default %q", got, testenv.DefaultRedis)
	}
	t.Setenv("IDEM_TEST_REDIS", "redis://127.0.0.1/2")
	if got := testenv.Redis(t); got != "redis://127.0.0.1/2" {
		t.Fatalf("Redis() = %q", got)
	}
}

func TestCI(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "TRUE": true, "1": true, "": false, "false": false, "0": false} {
		t.Setenv("CI", v)
		if got := testenv.CI(); got != want {
			t.Errorf("CI=%q: CI() = %v, want %v", v, got, want)
		}
	}
}
