package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// exitCode returns a finished command's exit status.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatal(err)
	return -1
}

// TestCLIMessages: what a user reads on the command line, for the mistakes
// and questions of a first session: the text, how often it appears, and the
// exit status.
func TestCLIMessages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := func(name, yaml string) string {
		f := filepath.Join(dir, name)
		if err := writeFile(f, yaml); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout []string // substrings of stdout
		stderr []string // substrings of stderr
		once   string   // appears exactly once in stderr
		not    []string // in neither
	}{
		{name: "serve --help exits 0", args: []string{"serve", "--help"}, code: 0,
			stderr: []string{"Usage: idem serve", "-drain-delay", "s3://", "redis-cluster://"}, once: "Usage: idem serve"},
		{name: "serve -h exits 0", args: []string{"serve", "-h"}, code: 0, once: "Usage: idem serve"},
		{name: "unknown flag once", args: []string{"serve", "--nope"}, code: 2,
			once: "flag provided but not defined: -nope", not: []string{"idem: flag provided"}},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, once: `unknown command "frobnicate"`},
		{name: "no command", args: nil, code: 2, stderr: []string{"Commands:", "s3://BUCKET/PREFIX", "redis-cluster://", "release"}},
		{name: "--version", args: []string{"--version"}, code: 0, stdout: []string{"idem ", "go1."}},
		{name: "version", args: []string{"version"}, code: 0, stdout: []string{"idem ", "go1."}},
		{name: "upstream without scheme", args: []string{"serve", "--upstream", "127.0.0.1:3000", "--store", "memory:"}, code: 1,
			stderr: []string{`upstream "127.0.0.1:3000" is not a URL: add the scheme, e.g. http://127.0.0.1:3000`},
			not:    []string{"first path segment"}},
		{name: "duplicate route", args: []string{"serve", "--store", "memory:", "--config",
			conf("dup.yaml", "upstream: http://127.0.0.1:3000\nroutes:\n  - match: POST /charges\n  - match: POST /charges\n")}, code: 1,
			stderr: []string{"routes[1] (POST /charges): the same pattern as routes[0]"}, not: []string{".go:", "registered at"}},
		{name: "unquoted memory:", args: []string{"serve", "--config", conf("mem.yaml", "upstream: http://127.0.0.1:3000\nstore: memory:\n")}, code: 1,
			stderr: []string{"line 2: store: memory:", `must be quoted, e.g. store: "memory:"`}},
		{name: "redis typo", args: []string{"cleanup", "--store", "redis://127.0.0.1:1/0"}, code: 1,
			once: "cannot connect", not: []string{"pool.go", "connection pool"}},
		{name: "cleanup --help", args: []string{"cleanup", "--help"}, code: 0, stderr: []string{"-admin URL", "s3://"}},
		{name: "inspect --help", args: []string{"inspect", "--help"}, code: 0, stderr: []string{"-admin URL", "s3://"}},
		{name: "release without admin", args: []string{"release", "--key", "k"}, code: 1,
			stderr: []string{"release: --admin URL is required"}},
		{name: "admin without token", args: []string{"inspect", "--admin", "http://127.0.0.1:1", "--key", "k"}, code: 1,
			stderr: []string{"--admin needs the gateway's admin token"}},
		{name: "migrate not postgres", args: []string{"migrate", "--store", "memory:"}, code: 1,
			stderr: []string{"not a PostgreSQL store", "the other stores need no migration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := runIdem(t, tc.args...)
			if c := exitCode(t, err); c != tc.code {
				t.Errorf("exit %d, want %d\nstdout %s\nstderr %s", c, tc.code, out, errOut)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if tc.once != "" {
				if n := strings.Count(errOut, tc.once); n != 1 {
					t.Errorf("%q appears %d times in stderr:\n%s", tc.once, n, errOut)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out+errOut, n) {
					t.Errorf("output contains %q:\n%s%s", n, out, errOut)
				}
			}
			if tc.name == "redis typo" {
				if lines := strings.Count(strings.TrimSpace(errOut), "\n") + 1; lines != 1 {
					t.Errorf("%d lines on stderr, want 1:\n%s", lines, errOut)
				}
			}
		})
	}
}

// TestDefaultStore: the default store is ./idem-data where idem is run by
// hand, and not relative to / under systemd.
func TestDefaultStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		wd, stateDir, want string
	}{
		{"/home/me/app", "", "file:./idem-data"},
		{"/", "", "file:/var/lib/idem/idem-data"},
		{"/", "/var/lib/idem", "file:/var/lib/idem/idem-data"},
		{"/", "/srv/state/idem:/srv/other", "file:/srv/state/idem/idem-data"},
	} {
		m := &Main{Getenv: func(k string) string { return map[string]string{"STATE_DIRECTORY": tc.stateDir}[k] },
			Getwd: func() (string, error) { return tc.wd, nil }}
		if got := m.defaultStore(); got != tc.want {
			t.Errorf("in %s with STATE_DIRECTORY=%q: %q, want %q", tc.wd, tc.stateDir, got, tc.want)
		}
		cfg, err := (&ServeCommand{m}).loadConfig([]string{"--upstream", "http://127.0.0.1:1"})
		if err != nil || cfg.Store != tc.want {
			t.Errorf("serve in %s: store %q, %v", tc.wd, cfg.Store, err)
		}
	}
}

// TestMaintenanceOutput: cleanup and inspect print their answer and
// nothing of the store's own logging (Pebble's WAL replay lines).
func TestMaintenanceOutput(t *testing.T) {
	t.Parallel()
	a := startAPI(t)
	dir := t.TempDir()
	g := startGateway(t, a.URL, dir, "")
	if r := post(t, g.URL+"/charges", chargeBody, "Idempotency-Key", "quiet-1"); r.Status != 201 {
		t.Fatal(r.Status)
	}
	if err := g.stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"inspect", "--store", "file:" + dir, "--key", "quiet-1"},
		{"cleanup", "--store", "file:" + dir},
	} {
		out, errOut, err := runIdem(t, args...)
		if err != nil || out == "" || errOut != "" {
			t.Errorf("%v: %v\nstdout %s\nstderr %q", args, err, out, errOut)
		}
	}
}

// TestRedisClusterGateway: gateways share a Redis Cluster named by a
// redis-cluster:// DSN; every key runs once across them.
func TestRedisClusterGateway(t *testing.T) {
	t.Parallel()
	dsn := testenv.RedisCluster(t)
	sharedStore(t, withParam(dsn, "idem_prefix=idem-e2e-cluster:"))
	if out, errOut, err := runIdem(t, "cleanup", "--store", dsn); err != nil || !strings.Contains(out, "removed 0 expired records") {
		t.Errorf("cleanup on the cluster: %v %s %s", err, out, errOut)
	}
}

// TestMigrateMessages: what `idem migrate` says when the table is new, up
// to date, and dropped by hand (it used to say "schema at version 1" for
// a table that was not there, and serve then answered 503).
func TestMigrateMessages(t *testing.T) {
	t.Parallel()
	base := testenv.Postgres(t)
	schema := fmt.Sprintf("idem_cli_migrate_%d", rand.Uint32())
	dsn := withParam(base, "idem_schema="+schema)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	shown := dsn[:strings.Index(dsn, "?")] // the DSN as printed starts the same
	for _, step := range []struct {
		before string
		want   []string
	}{
		{"", []string{": applied 0001_create_records, 0002_clock_token; schema at version 2\n"}},
		{"", []string{": schema at version 2 (checked: the table and its columns are there; nothing to do)\n"}},
		{"DROP TABLE " + schema + ".idem_records", []string{
			": the records table was recorded as migrated but did not exist (dropped?); created it again: its earlier records are gone\n",
			": applied 0001_create_records, 0002_clock_token; schema at version 2\n"}},
	} {
		if step.before != "" {
			if _, err := pool.Exec(ctx, step.before); err != nil {
				t.Fatal(err)
			}
		}
		out, errOut, err := runIdem(t, "migrate", "--store", dsn)
		if err != nil || errOut != "" {
			t.Fatalf("migrate: %v %s", err, errOut)
		}
		for _, w := range step.want {
			if !strings.Contains(out, w) || !strings.HasPrefix(out, shown) {
				t.Errorf("after %q: %q lacks %q", step.before, out, w)
			}
		}
	}
}
