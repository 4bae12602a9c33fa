package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

// FuzzMiddleware sends random methods, paths, keys, tenants and bodies
// through the middleware in front of a handler that always answers 200 or
// 201: whatever comes in, nothing panics and idem never answers 5xx.
func FuzzMiddleware(f *testing.F) {
	f.Add("POST", "/charges", "k1", "", "alice", "application/json", `{"a":1}`, uint8(0))
	f.Add("POST", "/charges", `"k1"`, `"k2"`, "alice", "application/json", `{"a":1}`, uint8(1))
	f.Add("PUT", "/x/../charges", "\x00", "", "", "text/plain", "\xff\xfe", uint8(2))
	f.Add("PATCH", "/charges?x=1", strings.Repeat("k", 300), "", "bob", "application/json", `{"a":[1,2,{"b":null}]}`, uint8(3))
	f.Add("DELETE", "//", "  ", "", "|", "", `[`, uint8(4))
	f.Add("GET", "/charges", "k", "", "alice", "", ``, uint8(5))
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1}, quietOpt)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "stream") {
			w.Header().Set("Content-Type", "text/event-stream")
		}
		w.WriteHeader(200 + len(r.URL.Path)%2)
		w.Write([]byte(`{"ok":true}`))
	})
	var handlers []http.Handler
	for _, o := range []idemhttp.Options{
		{Logger: quiet, SharedAnonymousScope: true},
		{Logger: quiet, Profile: idemhttp.Mobile(), Tenant: idemhttp.TenantHeader("X-User-ID")},
		{Logger: quiet, Profile: idemhttp.WorkflowAdmin(), MaxRequestBytes: 16},
		{Logger: quiet, Profile: idemhttp.Stripe(), Tenant: idemhttp.TenantFromHeaders("Authorization"), Routes: []idemhttp.Route{
			{Pattern: "POST /charges", Key: idemhttp.KeyRequired, Fingerprint: idemhttp.FingerprintFields("a", "b.c")},
			{Pattern: "/", Fingerprint: idemhttp.FingerprintNone},
		}},
	} {
		mw, err := idemhttp.New(eng, o)
		if err != nil {
			f.Fatal(err)
		}
		handlers = append(handlers, mw(handler))
	}
	f.Fuzz(func(t *testing.T, method, target, key1, key2, tenant, contentType, body string, which uint8) {
		req, err := http.NewRequest(method, "http://idem.test"+target, strings.NewReader(body))
		if err != nil || req.URL.Path == "" {
			return
		}
		req.RequestURI = req.URL.RequestURI()
		if key1 != "" || which%2 == 0 {
			req.Header.Add("Idempotency-Key", key1)
		}
		if key2 != "" {
			req.Header.Add("Idempotency-Key", key2)
		}
		req.Header.Set("X-User-ID", tenant)
		req.Header.Set("Authorization", tenant)
		req.Header.Set("Content-Type", contentType)
		for range 2 { // the second one may replay
			rec := httptest.NewRecorder()
			handlers[int(which)%len(handlers)].ServeHTTP(rec, req.Clone(req.Context()))
			if rec.Code >= 500 {
				t.Fatalf("%s %s key %q/%q: idem answered %d: %s", method, target, key1, key2, rec.Code, rec.Body)
			}
			if rec.Code >= 400 && rec.Code != 401 || rec.Code == 401 {
				ct := rec.Header().Get("Content-Type")
				if ct != "application/problem+json" && ct != "application/json" {
					t.Fatalf("%d answered with Content-Type %q", rec.Code, ct)
				}
			}
			req.Body = http.NoBody
			req = req.Clone(req.Context())
			req.Body = nopCloser{strings.NewReader(body)}
		}
	})
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }
