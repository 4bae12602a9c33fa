package inspect

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// TestDecodeMiddlewareValue decodes what idemhttp really stores, so that a
// change of its encoding fails here.
func TestDecodeMiddlewareValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, ctype string
		status            int
		check             func(t *testing.T, r *Response)
	}{
		{"json", `{"id":"ch_1","n":1}`, "application/json", 201, func(t *testing.T, r *Response) {
			if string(r.Body) != `{"id":"ch_1","n":1}` {
				t.Errorf("body = %s", r.Body)
			}
		}},
		{"text", "héllo", "text/plain", 409, func(t *testing.T, r *Response) {
			if r.BodyText == nil || *r.BodyText != "héllo" {
				t.Errorf("body_text = %v", r.BodyText)
			}
		}},
		{"binary", "\xff\x00\x01", "application/octet-stream", 200, func(t *testing.T, r *Response) {
			if r.BodyBase64 != "/wAB" {
				t.Errorf("body_base64 = %q", r.BodyBase64)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := memory.New()
			eng := idem.New(s, idem.Policy{})
			t.Cleanup(func() { eng.Close() }) // waits for the cleanup the call started
			h := idemhttp.Middleware(eng, idemhttp.Options{SharedAnonymousScope: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				w.Header().Set("Location", "/charges/ch_1")
				w.Header().Set("X-Not-Kept", "x")
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{}`))
			r.Header.Set("Idempotency-Key", "k1")
			r.Header.Set("X-Request-Id", "req-1")
			h.ServeHTTP(httptest.NewRecorder(), r)

			rec, err := s.Get(context.Background(), "", store.HashKey("", "k1"))
			if err != nil {
				t.Fatal(err)
			}
			v := New(rec)
			if v.Response == nil {
				t.Fatalf("value not decoded: %+v", v)
			}
			if v.Response.Status != tc.status || v.Response.Header.Get("Content-Type") != tc.ctype ||
				v.Response.Header.Get("Location") != "/charges/ch_1" || v.Response.Header.Get("X-Not-Kept") != "" {
				t.Errorf("response = %+v", v.Response)
			}
			tc.check(t, v.Response)
			if v.Key != "k1" || v.State != "succeeded" || v.RequestID != "req-1" || v.Binding != "POST /charges" || v.KeyHash != store.HashKey("", "k1") {
				t.Errorf("record = %+v", v)
			}
			b, err := Marshal(v)
			if err != nil || !json.Valid(b) {
				t.Fatalf("Marshal = %s, %v", b, err)
			}
		})
	}
}

func TestPlainValues(t *testing.T) {
	t.Parallel()
	now := time.Now()
	rec := store.Record{Key: "k", State: store.Succeeded, Value: []byte("task-42"), ExpiresAt: now.Add(time.Hour), ReadAt: now}
	v := New(rec)
	if v.Response != nil || v.ValueText == nil || *v.ValueText != "task-42" {
		t.Errorf("text value: %+v", v)
	}
	rec.Value = []byte{0x01, 0xff, 0xfe, 0x00, 0x00, 0x00, 0x9f}
	v = New(rec)
	if v.Response != nil || v.ValueBase64 == "" {
		t.Errorf("binary value: %+v", v)
	}
	rec = store.Record{State: store.InProgress, LeaseUntil: now.Add(-time.Second), ExpiresAt: now.Add(time.Hour)}
	rec.SetReadAt(now)
	if v := New(rec); !v.Stale || v.LeaseUntil.IsZero() || v.LeaseLeftMS != 0 || !v.ReadAt.Equal(now) {
		t.Errorf("stale in_progress record: %+v", v)
	}
	for _, b := range [][]byte{nil, {1, 0, 0, 50, 0, 0}, {1, 0, 0, 200, 0, 5}, {2, 0, 0, 200, 0, 0}} {
		if _, err := DecodeResponse(b); err == nil {
			t.Errorf("DecodeResponse(%v): no error", b)
		}
	}
}
