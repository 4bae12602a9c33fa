package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RedisCluster returns the DSN (redis-cluster://...) of a Redis Cluster:
// IDEM_TEST_REDIS_CLUSTER when set, else a 3-node cluster started for the
// test by scripts/redis-cluster.sh and stopped when it ends.
func RedisCluster(t testing.TB) string {
	t.Helper()
	if v := os.Getenv("IDEM_TEST_REDIS_CLUSTER"); v != "" {
		return v
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			Unavailable(t, "%s is not installed (a Redis Cluster test)", bin)
		}
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "redis-cluster.sh")
	out, err := exec.Command(script, "start").Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		t.Fatalf("%s start: %s", script, msg)
	}
	var dsn, dir string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "IDEM_TEST_REDIS_CLUSTER="); ok {
			dsn = strings.Trim(v, "'")
		}
		if v, ok := strings.CutPrefix(line, "IDEM_REDIS_CLUSTER_DIR="); ok {
			dir = v
		}
	}
	t.Cleanup(func() {
		cmd := exec.Command(script, "stop")
		cmd.Env = append(os.Environ(), "IDEM_REDIS_CLUSTER_DIR="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s stop: %v %s", script, err, out)
		}
	})
	if dsn == "" || dir == "" {
		t.Fatalf("%s start printed %q", script, out)
	}
	return dsn
}

// repoRoot is the directory holding go.mod, found from the working
// directory (a package's, under go test).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
