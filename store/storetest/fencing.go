package storetest

// Fencing: every write that ends or extends a reservation holds only with
// the holder's token.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

func testComplete(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	reserved := mustGet(t, s, req)

	wrong := complete(req, store.Succeeded, []byte("intruder"))
	wrong.Token++
	if err := s.Complete(ctx, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete with a wrong token: %v, want ErrLeaseLost", err)
	}
	c := complete(req, store.Succeeded, []byte(`{"id":"ch_1"}`))
	c.TTL = 2 * longTTL
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	want := req.Record
	want.State, want.Value = store.Succeeded, c.Value
	got := mustGet(t, s, req)
	checkRecord(t, got, want)
	checkTimes(t, h, got, 0, c.TTL)
	if !got.CreatedAt.Equal(reserved.CreatedAt) || got.UpdatedAt.Before(reserved.UpdatedAt) {
		t.Fatalf("completion moved the creation (%v to %v) or went back in time (updated %v to %v)",
			reserved.CreatedAt, got.CreatedAt, reserved.UpdatedAt, got.UpdatedAt)
	}

	// A completed record cannot be completed, renewed or released again.
	if err := s.Complete(ctx, complete(req, store.Failed, []byte("late"))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second Complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, fence(req), longLease); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew after Complete: %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, fence(req)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release after Complete: %v, want ErrLeaseLost", err)
	}
	checkRecord(t, mustGet(t, s, req), want)
	// Completing an absent key is a lost lease, not a creation.
	ghost := request(uniqueKey(t))
	if err := s.Complete(ctx, complete(ghost, store.Succeeded, nil)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete of an absent key: %v, want ErrLeaseLost", err)
	}
	wantNotFound(t, s, ghost)
}

func testFail(t *testing.T, h Harness) {
	s := newStore(t, h)
	req := leased(uniqueKey(t), shortLease)
	mustReserve(t, s, req)
	c := complete(req, store.Failed, []byte("card_declined"))
	if err := s.Complete(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, req)
	if got.State != store.Failed || string(got.Value) != "card_declined" {
		t.Fatalf("got %s %q, want failed card_declined", got.State, got.Value)
	}
	// A failed record is not stale, whatever its lease said.
	time.Sleep(2 * shortLease)
	for range 2 { // a store without a clock starts watching at the first read
		res, err := s.Reserve(context.Background(), request(req.Record.Key))
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired || res.Existing.State != store.Failed || res.Existing.Stale() {
			t.Fatalf("reserve over a failed record: %+v", res)
		}
		time.Sleep(2 * shortLease)
	}
}

// testReleaseFailed: a failed record is released by its token (an operator
// frees a key whose outcome is unknown); a succeeded one never is.
func testReleaseFailed(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	if err := s.Complete(ctx, complete(req, store.Failed, []byte("upstream timeout"))); err != nil {
		t.Fatal(err)
	}
	wrong := fence(req)
	wrong.Token++
	if err := s.Release(ctx, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release of a failed record with a wrong token: %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, fence(req), longLease); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew of a failed record: %v, want ErrLeaseLost", err)
	}
	mustGet(t, s, req)
	if err := s.Release(ctx, fence(req)); err != nil {
		t.Fatalf("Release of a failed record: %v", err)
	}
	wantNotFound(t, s, req)
	mustReserve(t, s, request(req.Record.Key))

	ok := request(uniqueKey(t))
	mustReserve(t, s, ok)
	c := complete(ok, store.Succeeded, []byte(`{"id":"ch_1"}`))
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, fence(ok)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release of a succeeded record: %v, want ErrLeaseLost", err)
	}
	if got := mustGet(t, s, ok); got.State != store.Succeeded {
		t.Fatalf("succeeded record after Release: %s", got.State)
	}
}

func testRelease(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	wrong := fence(req)
	wrong.Token++
	if err := s.Release(ctx, wrong); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release with a wrong token: %v, want ErrLeaseLost", err)
	}
	mustGet(t, s, req)
	if err := s.Release(ctx, fence(req)); err != nil {
		t.Fatal(err)
	}
	wantNotFound(t, s, req)
	if err := s.Release(ctx, fence(req)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second Release: %v, want ErrLeaseLost", err)
	}
	// The key can be reserved again, by anybody.
	again := request(req.Record.Key)
	again.Record.Fingerprint = "sha256:another"
	mustReserve(t, s, again)
}

// testRenew: a lease renewed before it ends is never judged over, by any
// client, however long the holder runs; once renewals stop, it ends.
func testRenew(t *testing.T, h Harness) {
	s := newStore(t, h)
	cs := clients(t, h, s)
	ctx := context.Background()
	req := leased(uniqueKey(t), shortLease)
	mustReserve(t, s, req)
	wrong := fence(req)
	wrong.Token++
	if err := s.Renew(ctx, wrong, longLease); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew with a wrong token: %v, want ErrLeaseLost", err)
	}
	// Renewed with a long lease: live for every client, however many
	// short leases pass.
	if err := s.Renew(ctx, fence(req), longLease); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		time.Sleep(shortLease)
		for _, c := range cs {
			res, err := c.Reserve(ctx, request(req.Record.Key))
			if err != nil {
				t.Fatal(err)
			}
			if res.Acquired {
				t.Fatal("a renewed lease was taken over")
			}
			if res.Existing.Token != req.Record.Token || res.Existing.LeaseLeft <= shortLease {
				t.Fatalf("existing token %d (want %d), lease left %v", res.Existing.Token, req.Record.Token, res.Existing.LeaseLeft)
			}
		}
	}
	// Renewed with a short lease and left: the lease ends.
	if err := s.Renew(ctx, fence(req), shortLease); err != nil {
		t.Fatal(err)
	}
	if got := waitStale(t, cs[len(cs)-1], leased(req.Record.Key, shortLease)); got.Token != req.Record.Token {
		t.Fatalf("stale record's token %d, want %d", got.Token, req.Record.Token)
	}
}

func testFencingStaleHolder(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	old := leased(uniqueKey(t), shortLease)
	mustReserve(t, s, old)
	waitStale(t, s, old)
	taker := leased(old.Record.Key, longLease)
	taker.TTL = h.shortTTL()
	mustReserve(t, s, taker)

	// The old holder wakes up: every write it tries is fenced off.
	if err := s.Renew(ctx, fence(old), longLease); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Renew: %v", err)
	}
	if err := s.Complete(ctx, complete(old, store.Succeeded, []byte("stale"))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Complete: %v", err)
	}
	if err := s.Release(ctx, fence(old)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Release: %v", err)
	}
	if got := mustGet(t, s, old); got.Token != taker.Record.Token || got.State != store.InProgress {
		t.Fatalf("record after fencing: token %d state %s", got.Token, got.State)
	}

	// The same holds when the record expired and a new caller reused the key:
	// a token never comes back.
	waitGone(t, s, taker, taker.TTL)
	reuse := request(old.Record.Key)
	mustReserve(t, s, reuse)
	if err := s.Complete(ctx, complete(taker, store.Failed, []byte("ghost"))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete by the holder of an expired record: %v", err)
	}
	if got := mustGet(t, s, reuse); got.Token != reuse.Record.Token || got.State != store.InProgress {
		t.Fatalf("record after the expired holder's write: %+v", got)
	}
}
