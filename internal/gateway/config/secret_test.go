package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	s1 = "first-secret-of-at-least-16-bytes"
	s2 = "second-secret-of-at-least-16-byte"
)

func TestSecretSources(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(s2+"\n"+s1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		keys       int
	}{
		{"none", "", nil, 0},
		{"yaml list", "secret: [" + s2 + ", " + s1 + "]\n", nil, 2},
		{"yaml string", "secret: " + s1 + "\n", nil, 1},
		{"secret_file", "secret_file: " + file + "\n", nil, 2},
		{"IDEM_SECRET over the file", "secret_file: /nowhere\n", map[string]string{"IDEM_SECRET": s1 + "," + s2}, 2},
		{"IDEM_SECRET_FILE", "secret: " + s1 + "\n", map[string]string{"IDEM_SECRET_FILE": file}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte("upstream: http://u:1\n" + tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			c.ApplyEnv(func(k string) string { return tc.env[k] })
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			k, err := c.Keyring()
			if err != nil {
				t.Fatal(err)
			}
			if got := 0; k != nil {
				got = len(k.IDs())
				if got != tc.keys {
					t.Fatalf("%d keys, want %d", got, tc.keys)
				}
			} else if tc.keys != 0 {
				t.Fatal("no keyring")
			}
			if c.HasSecret() != (tc.keys > 0) {
				t.Fatalf("HasSecret = %v", c.HasSecret())
			}
		})
	}
}

func TestSecretErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"secret: [tooshort-secret]\n", "at least 16"},
		{"secret: [" + s1 + "]\nsecret_file: /x\n", "not both"},
		{"secret_file: /does/not/exist\n", "no such file"},
		{"max_header_bytes: 100\n", "max_header_bytes"},
		{"read_header_timeout: -1s\n", "read_header_timeout"},
	} {
		c, err := Parse([]byte("upstream: http://u:1\n" + tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "tooshort-secret") {
			t.Errorf("the error quotes the secret: %v", err)
		}
	}
}

func TestServerLimits(t *testing.T) {
	t.Parallel()
	c, _ := mustValid(t, "upstream: http://u:1\n")
	if c.HeaderLimit() != DefaultMaxHeaderBytes || c.HeaderTimeout() != DefaultReadHeaderTimeout {
		t.Fatalf("defaults: %d %v", c.HeaderLimit(), c.HeaderTimeout())
	}
	c, _ = mustValid(t, "upstream: http://u:1\nmax_header_bytes: 16KiB\nread_header_timeout: 2s\n")
	if c.HeaderLimit() != 16<<10 || c.HeaderTimeout() != 2*time.Second {
		t.Fatalf("set: %d %v", c.HeaderLimit(), c.HeaderTimeout())
	}
}
