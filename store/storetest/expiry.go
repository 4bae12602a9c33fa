package storetest

// Expiry: records live their lifetime on the store's clock, then are
// absent, and Cleanup removes them.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

func testTTL(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	ttl := h.shortTTL()
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	c := complete(req, store.Succeeded, []byte("v"))
	c.TTL = ttl
	// Live until its lifetime has passed on the store's clock, counted
	// from no earlier than the completion was sent: a reader never finds
	// it gone sooner.
	done := time.Now()
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash)
		if errors.Is(err, store.ErrNotFound) {
			if lived := time.Since(done); lived < ttl-h.resolution() {
				t.Fatalf("record gone after %v, its lifetime is %v", lived, ttl)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.ExpiresIn() > ttl+h.resolution() {
			t.Fatalf("expires in %v, lifetime %v", r.ExpiresIn(), ttl)
		}
		if time.Since(done) > 20*ttl+10*time.Second {
			t.Fatalf("record still there %v after its lifetime of %v", time.Since(done), ttl)
		}
		time.Sleep(ttl / 10)
	}
	// An expired record is absent to Reserve as well, with any fingerprint.
	later := request(req.Record.Key)
	later.Record.Fingerprint = "sha256:new"
	later.TakeOverStale = false
	res, err := s.Reserve(ctx, later)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acquired || res.TookOver {
		t.Fatalf("reserve over an expired record: %+v; want acquired, not a takeover", res)
	}
	checkRecord(t, mustGet(t, s, later), later.Record)
}

func testCleanup(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	base := uniqueKey(t)
	ttl := h.shortTTL()
	var live, expired []store.ReserveRequest
	setup := time.Now()
	for i := range 40 {
		req := request(fmt.Sprintf("%s-%d", base, i))
		if i%2 == 0 {
			req.TTL = ttl
			expired = append(expired, req)
		} else {
			req.TTL = 48 * time.Hour
			live = append(live, req)
		}
		mustReserve(t, s, req)
		if i%4 < 2 { // half of each kind completed
			c := complete(req, store.Succeeded, []byte("v"))
			c.TTL = req.TTL
			if err := s.Complete(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Nothing has expired yet, unless writing the records took longer
	// than their lifetime (a loaded machine): then the early Cleanup may
	// remove some, and the two together must remove them all.
	early, err := s.Cleanup(ctx, 0)
	if err != nil || (early != 0 && !h.NativeExpiry && time.Since(setup) < ttl/2) {
		t.Fatalf("Cleanup before anything expired: %d, %v", early, err)
	}
	for _, r := range expired {
		waitGone(t, s, r, ttl)
	}
	n, err := s.Cleanup(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	swept := 0
	if h.Swept != nil {
		swept = h.Swept(s)
	}
	if !h.NativeExpiry && early+n+swept != len(expired) {
		t.Fatalf("Cleanup removed %d (and %d before, the store %d itself), want %d", n, early, swept, len(expired))
	}
	for _, r := range live {
		mustGet(t, s, r)
	}
	for _, r := range expired {
		wantNotFound(t, s, r)
	}
	if h.NativeExpiry {
		return
	}
	if n, err := s.Cleanup(ctx, 0); err != nil || n != 0 {
		t.Fatalf("second Cleanup: %d, %v", n, err)
	}
}

func testCleanupLimit(t *testing.T, h Harness) {
	if h.NativeExpiry {
		t.Skip("the backend expires records itself")
	}
	s := newStore(t, h)
	ctx := context.Background()
	base := uniqueKey(t)
	ttl := h.shortTTL()
	var last store.ReserveRequest
	for i := range 25 {
		last = request(fmt.Sprintf("%s-%d", base, i))
		last.TTL = ttl
		mustReserve(t, s, last)
	}
	waitGone(t, s, last, ttl)
	total := 0
	for range 10 {
		n, err := s.Cleanup(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if n > 10 {
			t.Fatalf("Cleanup with limit 10 removed %d", n)
		}
		total += n
		if n == 0 {
			break
		}
	}
	if total != 25 {
		t.Fatalf("Cleanup in batches removed %d, want 25", total)
	}
}
