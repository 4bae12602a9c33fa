package idemhttp_test

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/idemhttp"
)

// A tenant at its cap of live keys gets 429 too_many_keys, with
// Retry-After until its earliest record expires, for a new key; its
// retries of keys it holds are still replayed; another tenant, and the
// anonymous scope under its own lower cap, are not held back; once a
// record expires the tenant gets a new key again.
func TestMaxKeysPerTenant(t *testing.T) {
	t.Parallel()
	// The default tenant, with the anonymous scope opted into (newServer).
	s := newServer(t, idemhttp.Options{
		MaxKeysPerTenant: 3, MaxKeysAnonymous: 1}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /charges", s.counting(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
		}))
	})
	as := func(who string, key string) *response {
		h := []string{"Idempotency-Key", key}
		if who != "" {
			h = append(h, "Authorization", "Bearer "+who)
		}
		return s.do("POST", "/charges", `{}`, h...)
	}
	for i := range 3 {
		if r := as("alice", "a"+strconv.Itoa(i)); r.Status != http.StatusCreated {
			t.Fatalf("alice's key %d: %d %s", i, r.Status, r.Body)
		}
	}
	r := as("alice", "a3")
	problem(t, r, http.StatusTooManyRequests, idemhttp.KindTooManyKeys)
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 23*3600 {
		t.Errorf("Retry-After %q, want about the TTL (24 h)", r.Header.Get("Retry-After"))
	}
	if n := s.count("POST", "/charges", "a3"); n != 0 {
		t.Errorf("the refused key ran %d times", n)
	}
	if r := as("alice", "a0"); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a retry of a key alice holds: %d replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	if r := as("bob", "a3"); r.Status != http.StatusCreated {
		t.Errorf("bob while alice is at her cap: %d %s", r.Status, r.Body)
	}
	if r := as("", "n0"); r.Status != http.StatusCreated {
		t.Errorf("the anonymous scope's first key: %d %s", r.Status, r.Body)
	}
	problem(t, as("", "n1"), http.StatusTooManyRequests, idemhttp.KindTooManyKeys)

	s.clock.Add(24*time.Hour + 2*time.Minute) // every record expired (counted to the end of its expiry's minute)
	if r := as("alice", "a3"); r.Status != http.StatusCreated || s.count("POST", "/charges", "a3") != 2 {
		t.Errorf("alice after her records expired: %d, ran %d", r.Status, s.count("POST", "/charges", "a3"))
	}
}

// MaxBytesPerTenant refuses a tenant's new keys once its live records
// hold that many bytes (responses plus 1 KiB each); another tenant is
// not held back.
func TestMaxBytesPerTenant(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{Tenant: idemhttp.TenantHeader("X-User-ID"), MaxBytesPerTenant: 3000},
		func(s *server, mux *http.ServeMux) {
			mux.HandleFunc("POST /charges", s.counting(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(make([]byte, 1500))
			}))
		})
	as := func(who, key string) *response {
		return s.do("POST", "/charges", `{}`, "Idempotency-Key", key, "X-User-ID", who)
	}
	for _, k := range []string{"b1", "b2"} { // 2524 bytes counted after the first: under the bound
		if r := as("alice", k); r.Status != http.StatusCreated {
			t.Fatalf("alice %s: %d %s", k, r.Status, r.Body)
		}
	}
	problem(t, as("alice", "b3"), http.StatusTooManyRequests, idemhttp.KindTooManyKeys)
	if r := as("bob", "b3"); r.Status != http.StatusCreated {
		t.Errorf("bob: %d %s", r.Status, r.Body)
	}
}

// Concurrent new keys of one tenant never get past its cap: running calls
// count as records.
func TestMaxKeysPerTenantConcurrent(t *testing.T) {
	t.Parallel()
	s := newServer(t, idemhttp.Options{Tenant: idemhttp.TenantHeader("X-User-ID"), MaxKeysPerTenant: 5},
		func(s *server, mux *http.ServeMux) {
			mux.HandleFunc("POST /charges", s.counting(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
		})
	statuses := make([]int, 40)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = s.do("POST", "/charges", `{}`, "Idempotency-Key", "c"+strconv.Itoa(i), "X-User-ID", "alice").Status
		}()
	}
	wg.Wait()
	created, refused := 0, 0
	for _, st := range statuses {
		switch st {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
			refused++
		}
	}
	if created != 5 || refused != 35 || s.total() != 5 {
		t.Errorf("created %d, refused %d, ran %d; want 5, 35, 5", created, refused, s.total())
	}
}
