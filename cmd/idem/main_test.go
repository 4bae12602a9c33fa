package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeConfigPrecedence: flags win over IDEM_* variables, which win
// over the file, which wins over the defaults.
func TestServeConfigPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "idem.yaml")
	if err := os.WriteFile(file, []byte(`
listen: 127.0.0.1:1001
upstream: http://file:1
store: file:/from/file
admin_listen: 127.0.0.1:1002
log_level: warn
defaults: {ttl: 7d}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want [5]string // listen, upstream, store, admin, log level
	}{
		{"file only", nil, []string{"--config", file},
			[5]string{"127.0.0.1:1001", "http://file:1", "file:/from/file", "127.0.0.1:1002", "warn"}},
		{"IDEM_CONFIG", map[string]string{"IDEM_CONFIG": file}, nil,
			[5]string{"127.0.0.1:1001", "http://file:1", "file:/from/file", "127.0.0.1:1002", "warn"}},
		{"env over file", map[string]string{"IDEM_CONFIG": file, "IDEM_LISTEN": "127.0.0.1:2001", "IDEM_UPSTREAM": "http://env:2",
			"IDEM_STORE": "memory:", "IDEM_ADMIN_LISTEN": "off", "IDEM_LOG_LEVEL": "debug"}, nil,
			[5]string{"127.0.0.1:2001", "http://env:2", "memory:", "off", "debug"}},
		{"flags over env", map[string]string{"IDEM_LISTEN": "127.0.0.1:2001", "IDEM_UPSTREAM": "http://env:2", "IDEM_STORE": "memory:"},
			[]string{"--config", file, "--listen", "127.0.0.1:3001", "--upstream", "http://flag:3", "--store", "file:/from/flag",
				"--admin-listen", "127.0.0.1:3002", "--log-level", "error"},
			[5]string{"127.0.0.1:3001", "http://flag:3", "file:/from/flag", "127.0.0.1:3002", "error"}},
		{"no file", nil, []string{"--upstream", "http://flag:3"},
			[5]string{"127.0.0.1:8080", "http://flag:3", "file:./idem-data", "127.0.0.1:9090", "info"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(k string) string { return tc.env[k] }}
			cfg, err := (&ServeCommand{m}).loadConfig(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			got := [5]string{cfg.Listen, cfg.Upstream, cfg.Store, cfg.AdminListen, cfg.LogLevel}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "upstream is required"},
		{[]string{"--upstream", "http://u:1", "--store", "ftp://x"}, "unknown store DSN"},
		{[]string{"--upstream", "http://u:1", "--migrate", "maybe"}, "--migrate"},
		{[]string{"--upstream", "http://u:1", "extra"}, "unexpected arguments"},
		{[]string{"--config", "/does/not/exist.yaml"}, "no such file"},
		{[]string{"--nope"}, "flag provided but not defined"},
	} {
		var stderr bytes.Buffer
		m := &Main{Stdout: &bytes.Buffer{}, Stderr: &stderr, Getenv: func(string) string { return "" }}
		_, err := (&ServeCommand{m}).loadConfig(tc.args)
		if err == nil || !strings.Contains(err.Error()+stderr.String(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestStoreDSN(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "idem.yaml")
	if err := os.WriteFile(file, []byte("upstream: http://u:1\nstore: \"memory:\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag, config string
		env          map[string]string
		want         string
	}{
		{"file:/f", file, map[string]string{"IDEM_STORE": "redis://e"}, "file:/f"},
		{"", file, map[string]string{"IDEM_STORE": "redis://e"}, "redis://e"},
		{"", file, nil, "memory:"},
		{"", "", map[string]string{"IDEM_CONFIG": file}, "memory:"},
		{"", "", nil, "file:./idem-data"},
	} {
		m := &Main{Getenv: func(k string) string { return tc.env[k] }}
		got, err := m.storeDSN(tc.flag, tc.config)
		if err != nil || got != tc.want {
			t.Errorf("storeDSN(%q, %q) with %v = %q, %v; want %q", tc.flag, tc.config, tc.env, got, err, tc.want)
		}
	}
}

func TestInProcessCommands(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	ctx := context.Background()
	if err := m.Run(ctx, []string{"version"}); err != nil || !strings.HasPrefix(out.String(), "idem ") {
		t.Errorf("version: %q %v", out.String(), err)
	}
	if err := m.Run(ctx, []string{"migrate", "--store", "memory:"}); err == nil || !strings.Contains(err.Error(), "not a PostgreSQL store") {
		t.Errorf("migrate memory: %v", err)
	}
	if err := m.Run(ctx, []string{"inspect", "--store", "memory:"}); err == nil || !strings.Contains(err.Error(), "--key is required") {
		t.Errorf("inspect without key: %v", err)
	}
	if err := m.Run(ctx, []string{"inspect", "--store", "memory:", "--key", "k"}); err == nil || !strings.Contains(err.Error(), "no live record") {
		t.Errorf("inspect of an empty store: %v", err)
	}
	out.Reset()
	if err := m.Run(ctx, []string{"cleanup", "--store", "memory:"}); err != nil || !strings.Contains(out.String(), "removed 0 expired records") {
		t.Errorf("cleanup: %q %v", out.String(), err)
	}
	out.Reset()
	if err := m.Run(ctx, []string{"cleanup", "--store", "memory:", "--dry-run"}); err != nil || !strings.Contains(out.String(), "0 expired records") {
		t.Errorf("cleanup --dry-run on memory: %q %v", out.String(), err)
	}
}
