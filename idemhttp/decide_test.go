package idemhttp_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/idemhttp"
)

// TestUnrecordedAnswersAsARetry: a call whose outcome could not be
// recorded (its lease was lost) answers what a retry of it gets, decided
// as the engine decides a retry: here the key is held by a call bound to
// another action, which is a key reused (422), never "in progress" (409).
// The middleware used to decide on its own, and in another order.
func TestUnrecordedAnswersAsARetry(t *testing.T) {
	t.Parallel()
	holdA, startedA := make(chan struct{}), make(chan struct{})
	holdC, startedC := make(chan struct{}), make(chan struct{})
	s := newServer(t, idemhttp.Options{}, func(s *server, mux *http.ServeMux) {
		mux.HandleFunc("POST /charges", s.counting(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Step") == "a" {
				close(startedA)
				<-holdA
				w.WriteHeader(http.StatusCreated)
				return
			}
			w.WriteHeader(http.StatusInternalServerError) // a failure: the key is released
		}))
		mux.HandleFunc("POST /refunds", s.counting(func(w http.ResponseWriter, r *http.Request) {
			close(startedC)
			<-holdC
			w.WriteHeader(http.StatusCreated)
		}))
	})
	// Handlers still held when a check fails are let go before the server
	// closes (cleanups run last registered first).
	releaseA, releaseC := sync.OnceFunc(func() { close(holdA) }), sync.OnceFunc(func() { close(holdC) })
	t.Cleanup(releaseA)
	t.Cleanup(releaseC)
	first := make(chan *response, 1)
	go func() { first <- s.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "X-Step", "a") }()
	<-startedA
	s.clock.Add(2 * time.Minute) // the first call's lease is over on the store's clock
	if r := s.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "X-Step", "b"); r.Status != http.StatusInternalServerError {
		t.Fatalf("the takeover: %d %s", r.Status, r.Body)
	}
	third := make(chan *response, 1)
	go func() { third <- s.do("POST", "/refunds", `{}`, "Idempotency-Key", "k") }()
	<-startedC // the key is held, for another action
	releaseA()
	a := <-first
	problem(t, a, http.StatusUnprocessableEntity, idemhttp.KindKeyReused)
	// A retry of the first call gets the same.
	problem(t, s.do("POST", "/charges", `{}`, "Idempotency-Key", "k", "X-Step", "a"), http.StatusUnprocessableEntity, idemhttp.KindKeyReused)
	releaseC()
	if r := <-third; r.Status != http.StatusCreated {
		t.Fatalf("the refund: %d %s", r.Status, r.Body)
	}
}
