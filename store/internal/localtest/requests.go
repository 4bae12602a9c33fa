package localtest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

// Short is a lease or lifetime that a test waits out.
const Short = 30 * time.Millisecond

var tokens atomic.Uint64

// ReserveReq reserves key with a lease of a minute (it never runs out
// during a test) and a lifetime of ttl, on a token of its own.
func ReserveReq(key string, ttl time.Duration) store.ReserveRequest {
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("s", key), Scope: "s", Key: key,
			Fingerprint: "fp", Binding: "POST /x", State: store.InProgress,
			Token: tokens.Add(1), RequestID: "req-" + key,
		},
		Lease: time.Minute, TTL: ttl, TakeOverStale: true,
	}
}

// Leased is ReserveReq with the lease lease.
func Leased(key string, lease, ttl time.Duration) store.ReserveRequest {
	r := ReserveReq(key, ttl)
	r.Lease = lease
	return r
}

// FenceOf is the fence of the reservation req makes.
func FenceOf(req store.ReserveRequest) store.Fence {
	return store.Fence{KeyHash: req.Record.KeyHash, Scope: req.Record.Scope, Token: req.Record.Token}
}

// Reserved reserves key on s with ReserveReq, failing t if it cannot.
func Reserved(t testing.TB, s store.Store, key string, ttl time.Duration) store.ReserveRequest {
	t.Helper()
	req := ReserveReq(key, ttl)
	if _, err := s.Reserve(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return req
}

// ReserveMany reserves keys "0" to n-1 on s, for a lifetime of Short when
// short says so and of long otherwise, and returns the last of the short
// ones.
func ReserveMany(t testing.TB, s store.Store, n int, long time.Duration, short func(i int) bool) (last store.ReserveRequest) {
	t.Helper()
	for i := range n {
		ttl := long
		if short(i) {
			ttl = Short
		}
		req := Reserved(t, s, fmt.Sprint(i), ttl)
		if ttl == Short {
			last = req
		}
	}
	return last
}

// Complete stores value as the outcome of req, for ttl.
func Complete(t testing.TB, s store.Store, req store.ReserveRequest, value string, ttl time.Duration) {
	t.Helper()
	if err := s.Complete(context.Background(), store.Completion{Fence: FenceOf(req), State: store.Succeeded,
		Value: []byte(value), TTL: ttl}); err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond until it holds, failing the test after a
// deadline generous enough for a loaded machine.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Gone waits until the record of req has expired.
func Gone(t testing.TB, s store.Store, req store.ReserveRequest) {
	t.Helper()
	Eventually(t, "record "+req.Record.Key+" expires", func() bool {
		_, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
		return errors.Is(err, store.ErrNotFound)
	})
}

// Stale waits until the record of req is stale.
func Stale(t testing.TB, s store.Store, req store.ReserveRequest) {
	t.Helper()
	Eventually(t, "lease of "+req.Record.Key+" runs out", func() bool {
		r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
		return err == nil && r.Stale()
	})
}
