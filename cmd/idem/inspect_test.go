package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInspectFindsScopeThroughRoutes: --path (with --config) finds a key's
// scope as the gateway's routes do, instead of making the operator spell
// TENANT|METHOD /path.
func TestInspectFindsScopeThroughRoutes(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "idem.yaml")
	os.WriteFile(cfg, []byte("upstream: http://127.0.0.1:1\nstore: \"memory:\"\ntenant: {header: X-User-ID}\nroutes:\n  - match: POST /charges\n    profile: stripe\n"), 0o600)
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	err := m.Run(context.Background(), []string{"inspect", "--config", cfg, "--path", "/charges", "--tenant", "alice", "--key", "k"})
	if err == nil || !strings.Contains(err.Error(), `scope "alice|POST /charges"`) {
		t.Fatalf("inspect --path: %v", err)
	}
	err = m.Run(context.Background(), []string{"inspect", "--config", cfg, "--path", "/refunds", "--key", "k"})
	if err == nil || !strings.Contains(err.Error(), "no route") {
		t.Fatalf("inspect --path outside the routes: %v", err)
	}
}
