package config

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

// TestRoutePatternRefused: route patterns that ServeMux accepts but that
// cannot mean what was written are refused at start, the message naming
// the fix. Before, each of these started without a word and protected
// nothing: a keyed POST then ran on every retry.
func TestRoutePatternRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ match, want string }{
		{"POST/charges", `routes[1] (POST/charges): no space between method and path; write "POST /charges"`},
		{"post/charges", `no space between method and path; write "POST /charges"`},
		{"POTS/charges", `no space between method and path; write "POST /charges"`},
		{"POTS /charges", `routes[1] (POTS /charges): unknown method "POTS": requests with it never come, so the route would protect nothing; write "POST /charges"`},
		{"DELTE /charges/{id}", `unknown method "DELTE"`},
		{"FROB /charges", `unknown method "FROB": requests with it never come, so the route would protect nothing; write one of POST, PUT, PATCH, DELETE`},
		{"post /charges", `routes[1] (post /charges): method "post" is not upper-case: methods are case-sensitive, and clients send POST; write "POST /charges"`},
		{"Put /charges/{id}", `method "Put" is not upper-case: methods are case-sensitive, and clients send PUT; write "PUT /charges/{id}"`},
		{"api.example.com/charges", `"api.example.com" before the path is read as a host name, and requests for any other host would pass through unprotected; the gateway matches method and path only: write "/charges"`},
		{"POST api.example.com/charges", `write "POST /charges"`},
		{"GET /charges", `GET requests always pass through unprotected (they change nothing, so there is nothing to run once); protect the method that does the work, e.g. "POST /charges", or remove the route`},
		{"HEAD /charges", "HEAD requests always pass through unprotected"},
		{"OPTIONS /charges", "OPTIONS requests always pass through unprotected"},
		{"TRACE /charges", "TRACE requests always pass through unprotected"},
		{"POST charges", `the path must start with /; write "POST /charges"`},
		{"POST", `the path must start with /; write "POST /..."`},
		{`POST /charges `, `white space in the path "/charges " never matches a request`},
	} {
		t.Run(tc.match, func(t *testing.T) {
			t.Parallel()
			c := &Config{Upstream: "http://127.0.0.1:1", Routes: []Route{{Match: "POST /refunds"}, {Match: tc.match}}}
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v\nwant %q", err, tc.want)
			}
		})
	}
}

// TestRoutePatternAccepted: the patterns users write are accepted, and
// each really covers the keyed requests it names.
func TestRoutePatternAccepted(t *testing.T) {
	t.Parallel()
	eng := idem.New(memory.New(), idem.Policy{})
	t.Cleanup(func() { eng.Close() })
	for _, tc := range []struct{ match, method, target string }{
		{"POST /charges", "POST", "/charges"},
		{"POST   /charges", "POST", "/charges"},
		{"PUT\t/charges/{id}", "PUT", "/charges/ch_1"},
		{"PATCH /charges/{id}", "PATCH", "/charges/ch_1"},
		{"DELETE /charges/{id}", "DELETE", "/charges/ch_1"},
		{"/charges", "POST", "/charges"},
		{"/", "PUT", "/anything"},
		{"POST /api/{rest...}", "POST", "/api/a/b"},
		{"POST /charges/{$}", "POST", "/charges/"},
		{"PROPPATCH /files/{name}", "PROPPATCH", "/files/a"},
		{" /charges", "POST", "/charges"},
	} {
		c := &Config{Upstream: "http://127.0.0.1:1", Routes: []Route{{Match: tc.match}}}
		if err := c.Validate(); err != nil {
			t.Errorf("%q: %v", tc.match, err)
			continue
		}
		b, err := c.Build()
		if err != nil {
			t.Fatal(err)
		}
		rs, err := idemhttp.Compile(eng, b.Options)
		if err != nil {
			t.Fatalf("%q: %v", tc.match, err)
		}
		r := httptest.NewRequest(tc.method, "http://any.example"+tc.target, nil)
		if rt := rs.Match(r); rt == nil || rt.Pattern != tc.match {
			t.Errorf("%q does not cover %s %s", tc.match, tc.method, tc.target)
		}
	}
}
