package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

// TestMatchAsServeMux: a request is covered by the route whose pattern
// net/http's ServeMux would choose for it, whether the middleware matched
// it through the ServeMux or, for a method and a literal path, without.
func TestMatchAsServeMux(t *testing.T) {
	eng := idem.New(memory.New(), idem.Policy{})
	t.Cleanup(func() { eng.Close() })
	tables := [][]string{
		{"POST /charges"},
		{"POST /charges", "PUT /charges", "POST /refunds"},
		{"POST /charges", "/charges"},
		{"/charges", "POST /charges/{x}"},
		{"POST /charges", "POST /{x}", "/"},
		{"POST /charges", "POST /charges/{id}", "POST /charges/"},
		{"POST /charges", "POST api.example/charges"},
		{"POST /charges", "example.com/"},
		{"POST   /charges", "DELETE\t/charges"},
		{"POST /a/b", "POST /a/{x}"},
		{"POST /charges/{$}", "POST /charges"},
	}
	targets := []string{
		"/charges", "/charges/", "/charg%65s", "/a/b", "/a%2Fb", "/x/../charges",
		"//charges", "/refunds", "/charges/ch_1", "/", "/other",
	}
	for _, table := range tables {
		var routes []idemhttp.Route
		ref := http.NewServeMux()
		for _, p := range table {
			routes = append(routes, idemhttp.Route{Pattern: p})
			ref.Handle(p, http.NotFoundHandler())
		}
		rs, err := idemhttp.Compile(eng, idemhttp.Options{Routes: routes})
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range targets {
			for _, host := range []string{"example.com", "api.example"} {
				for _, method := range []string{"POST", "PUT", "DELETE", "PATCH"} {
					r := httptest.NewRequest(method, "http://"+host+target, nil)
					want := refPattern(ref, r)
					got := ""
					if rt := rs.Match(r); rt != nil {
						got = rt.Pattern
					}
					if got != want {
						t.Errorf("routes %q: %s %s%s matched %q, want %q", table, method, host, target, got, want)
					}
				}
			}
		}
	}
}

// refPattern is the pattern ref chooses for r's cleaned path, "" for none.
func refPattern(ref *http.ServeMux, r *http.Request) string {
	p := path.Clean(r.URL.Path)
	if strings.HasSuffix(r.URL.Path, "/") && p != "/" {
		p += "/"
	}
	mr := r
	if p != r.URL.Path {
		mr = r.Clone(r.Context())
		mr.URL.Path, mr.URL.RawPath = p, ""
	}
	_, pattern := ref.Handler(mr)
	return pattern
}
