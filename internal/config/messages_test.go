package config

import (
	"strings"
	"testing"
)

// TestMessages: the text a user reads for the mistakes users make, checked
// word for word where it matters.
func TestMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings, in order
		not        []string
	}{
		{"unquoted memory:", "upstream: http://127.0.0.1:3000\nstore: memory:\n",
			[]string{`line 2: store: memory:: `, `mapping values are not allowed`, `must be quoted, e.g. store: "memory:"`}, nil},
		{"fingerprint fields without braces", "upstream: http://127.0.0.1:3000\nroutes:\n  - match: POST /charges\n    fingerprint: fields: [amount]\n",
			[]string{"line 4", "fingerprint: {fields: [amount]}"}, nil},
		{"duplicate route", "upstream: http://127.0.0.1:3000\nroutes:\n  - match: POST /charges\n  - match: POST /charges\n",
			[]string{"routes[1] (POST /charges): the same pattern as routes[0]"}, []string{".go:", "registered at"}},
		{"conflicting routes", "upstream: http://127.0.0.1:3000\nroutes:\n  - match: POST /a/{x}\n  - match: POST /{y}/b\n",
			[]string{"routes[1] (POST /{y}/b): pattern \"POST /{y}/b\" conflicts with pattern \"POST /a/{x}\": "}, []string{".go:", "registered at", "\n"}},
		{"upstream without scheme", "upstream: 127.0.0.1:3000\n",
			[]string{`upstream "127.0.0.1:3000" is not a URL: add the scheme, e.g. http://127.0.0.1:3000`}, []string{"first path segment"}},
		{"upstream host:port", "upstream: localhost:3000\n",
			[]string{`upstream "localhost:3000" is not a URL: add the scheme, e.g. http://localhost:3000`}, nil},
		{"drain_delay", "upstream: http://u:1\ndrain_delay: -1s\n", []string{"drain_delay: negative"}, nil},
		{"upstream_ready", "upstream: http://u:1\nupstream_ready: http\n", []string{`upstream_ready "http": want tcp, off, or a path such as /health`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if err == nil {
				err = c.Validate()
			}
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			rest := msg
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("message %q lacks %q", msg, w)
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tc.not {
				if strings.Contains(msg, n) {
					t.Errorf("message %q contains %q", msg, n)
				}
			}
		})
	}
}

func TestOperationsDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("upstream: http://u:1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.DrainDelayDuration() != 0 || c.UpstreamReadyCheck() != "tcp" {
		t.Errorf("defaults: drain %v, upstream_ready %q", c.DrainDelayDuration(), c.UpstreamReadyCheck())
	}
	c.ApplyEnv(func(k string) string {
		return map[string]string{"IDEM_DRAIN_DELAY": "5s", "IDEM_UPSTREAM_READY": "/health"}[k]
	})
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.DrainDelayDuration().String() != "5s" || c.UpstreamReadyCheck() != "/health" {
		t.Errorf("from the environment: drain %v, upstream_ready %q", c.DrainDelayDuration(), c.UpstreamReadyCheck())
	}
	c.ApplyEnv(func(k string) string { return map[string]string{"IDEM_DRAIN_DELAY": "soon"}[k] })
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "IDEM_DRAIN_DELAY") {
		t.Errorf("bad IDEM_DRAIN_DELAY: %v", err)
	}
}
