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

// TestYAMLTypeErrors: a value of the wrong kind is named by its field in
// plain words, with how to write it; never Go's types ("cannot unmarshal
// !!str into []config.Route").
func TestYAMLTypeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml, want string }{
		{"routes as a string", "upstream: http://u:1\nroutes: \"POST /charges\"\n",
			`line 2: routes: expected a list of routes, got a string ("POST /charges"); write routes: [{match: "POST /charges"}], or one "- match: ..." line per route`},
		{"routes as a mapping", "upstream: http://u:1\nroutes:\n  match: POST /charges\n",
			`line 3: routes: expected a list of routes, got a mapping; each route is a list item: put "- " before its match`},
		{"a route as a string", "upstream: http://u:1\nroutes:\n  - match: POST /a\n  - \"POST /charges\"\n",
			`line 4: routes[1]: expected a route, a mapping such as {match: "POST /charges", key: required}, got a string ("POST /charges"); write - match: "POST /charges"`},
		{"defaults as a profile name", "upstream: http://u:1\ndefaults: stripe\n",
			`line 2: defaults: expected a mapping of policy settings, such as {profile: ietf, ttl: 24h}, got a string ("stripe"); for a profile, write {profile: stripe}`},
		{"a list for a string", "upstream: [a, b]\n", "line 1: upstream: expected a string, got a list"},
		{"a mapping for a string", "upstream: http://u:1\nlisten: {host: 0.0.0.0, port: 8080}\n", "line 2: listen: expected a string, got a mapping"},
		{"a word for a boolean", "upstream: http://u:1\nmigrate: sometimes\n", `line 2: migrate: expected true or false, got a string ("sometimes")`},
		{"a word for a number", "upstream: http://u:1\ndefaults: {max_key_bytes: lots}\n", `line 2: defaults.max_key_bytes: "lots" is not a whole number`},
		{"a fraction for a number", "upstream: http://u:1\nroutes:\n  - match: POST /a\n    max_key_bytes: 1.5\n", `line 4: routes[0].max_key_bytes: "1.5" is not a whole number`},
		{"a duration without unit", "upstream: http://u:1\nroutes:\n  - match: POST /a\n    ttl: 10\n", `line 4: routes[0].ttl: bad duration "10"`},
		{"error_texts as a list", "upstream: http://u:1\ndefaults: {error_texts: [in_progress]}\n",
			"line 2: defaults.error_texts: expected a mapping from kinds of answer to texts, such as {in_progress: {code: BUSY, message: ...}}, got a list"},
		{"an error text as a string", "upstream: http://u:1\ndefaults:\n  error_texts:\n    in_progress: busy\n",
			`line 4: defaults.error_texts.in_progress: expected {code: ..., message: ...}, got a string ("busy"); write {code: ..., message: "busy"}`},
		{"a tenant header as a list", "upstream: http://u:1\ntenant: {header: [X-A, X-B]}\n", "line 2: tenant.header: expected a string, got a list"},
		{"the file as a list", "- upstream: http://u:1\n",
			`line 1: the file: expected a mapping of settings (upstream: http://..., routes: ...), got a list; settings are not list items: remove the "- " before them`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %q\nwant %q", err, tc.want)
			}
			for _, n := range []string{"cannot unmarshal", "config.", "!!", "[]"} {
				if strings.Contains(err.Error(), n) {
					t.Errorf("message %q shows Go's terms (%s)", err, n)
				}
			}
		})
	}
}
