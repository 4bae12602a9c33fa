package demoapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, h http.Handler, target, key, user, body string) (*httptest.ResponseRecorder, Charge) {
	t.Helper()
	r := httptest.NewRequest("POST", target, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	if user != "" {
		r.Header.Set("X-User-ID", user)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var c Charge
	if w.Code != http.StatusBadRequest {
		if err := json.Unmarshal(w.Body.Bytes(), &c); err != nil {
			t.Fatalf("body %q: %v", w.Body, err)
		}
	}
	return w, c
}

func TestAPI(t *testing.T) {
	t.Parallel()
	a := New()
	w, c := post(t, a, "/charges", "k1", "", `{"amount":1000,"currency":"eur"}`)
	if w.Code != 201 || c.ID != "ch_000001" || c.Count != 1 || c.Amount != 1000 || c.IdempotencyKey != "k1" || w.Header().Get("Location") != "/charges/ch_000001" {
		t.Errorf("first charge: %d %+v %v", w.Code, c, w.Header())
	}
	w, c = post(t, a, "/charges?status=500", "k1", "", `{"amount":1}`)
	if w.Code != 500 || c.Count != 2 || c.Error == "" || w.Header().Get("Location") != "" {
		t.Errorf("status=500: %d %+v", w.Code, c)
	}
	start := time.Now()
	w, c = post(t, a, "/charges?delay=50ms&status=409", "k2", "u1", `{}`)
	if w.Code != 409 || c.User != "u1" || time.Since(start) < 50*time.Millisecond {
		t.Errorf("delay+409: %d %+v after %v", w.Code, c, time.Since(start))
	}
	for _, bad := range []string{"/charges?status=x", "/charges?delay=forever", "/charges?status=99"} {
		if w, _ := post(t, a, bad, "", "", `{}`); w.Code != 400 {
			t.Errorf("%s: %d", bad, w.Code)
		}
	}
	if w, _ := post(t, a, "/charges", "", "", `not json`); w.Code != 400 {
		t.Errorf("bad body: %d", w.Code)
	}
	_, _ = post(t, a, "/charges", "", "", `{}`)

	r := httptest.NewRequest("GET", "/stats", nil)
	sw := httptest.NewRecorder()
	a.ServeHTTP(sw, r)
	var s Stats
	if err := json.Unmarshal(sw.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Charges != 4 || s.Executions["k1"] != 2 || s.Executions["u1/k2"] != 1 || s.Executions["(no key)"] != 1 {
		t.Errorf("stats = %+v", s)
	}
}
