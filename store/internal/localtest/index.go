package localtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

// IndexConsistent runs every kind of write, including the ones that
// move or drop a record's expiry, and checks the index after each.
func IndexConsistent(t *testing.T, h Harness) {
	s := h.OpenT(t, t.TempDir())
	ctx := context.Background()
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		h.Records(t, s)
	}
	a := ReserveReq("a", time.Hour)
	_, err := s.Reserve(ctx, a)
	step("reserve a", err)
	step("renew a", s.Renew(ctx, FenceOf(a), 2*time.Minute))
	step("complete a", s.Complete(ctx, store.Completion{Fence: FenceOf(a), State: store.Succeeded,
		Value: []byte("A"), TTL: 24 * time.Hour}))
	b := Leased("b", Short, time.Hour)
	_, err = s.Reserve(ctx, b)
	step("reserve b", err)
	Stale(t, s, b)
	take := ReserveReq("b", Short) // b's lease is over
	res, err := s.Reserve(ctx, take)
	step("take over b", err)
	if !res.TookOver {
		t.Fatalf("no takeover: %+v", res)
	}
	Gone(t, s, take)
	again := ReserveReq("b", time.Hour) // b expired
	res, err = s.Reserve(ctx, again)
	step("replace expired b", err)
	if !res.Acquired || res.TookOver {
		t.Fatalf("replacing an expired record: %+v", res)
	}
	step("release b", s.Release(ctx, FenceOf(again)))
	c := ReserveReq("c", Short)
	_, err = s.Reserve(ctx, c)
	step("reserve c", err)
	Gone(t, s, c)
	n, err := s.Cleanup(ctx, 0)
	step("cleanup", err)
	if n != 1 {
		t.Fatalf("cleanup removed %d, want 1 (c)", n)
	}
	if recs := h.Records(t, s); len(recs) != 1 || recs[a.Record.KeyHash] == nil {
		t.Fatalf("left %d records, want a alone", len(recs))
	}
}

// CleanupReadsOnlyDue checks that Cleanup reads the expiry index
// entries that are due and no others, however many records are live.
func CleanupReadsOnlyDue(t *testing.T, h Harness) {
	s := h.OpenT(t, t.TempDir())
	scanned := h.Scanned(s)
	ctx := context.Background()
	last := ReserveMany(t, s, 2000, 48*time.Hour, func(i int) bool { return i%100 == 0 })
	Gone(t, s, last)
	n, err := s.Cleanup(ctx, 0)
	if err != nil || n != 20 {
		t.Fatalf("Cleanup: %d, %v; want 20", n, err)
	}
	if *scanned != 20 {
		t.Fatalf("Cleanup read %d index entries for 20 expired records", *scanned)
	}
	if recs := h.Records(t, s); len(recs) != 1980 {
		t.Fatalf("%d records left, want 1980", len(recs))
	}
	// In chunks under a limit, the same.
	for i := range 600 {
		last = ReserveReq(fmt.Sprint("b", i), Short)
		if _, err := s.Reserve(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	Gone(t, s, last)
	*scanned = 0
	total := 0
	for {
		n, err := s.Cleanup(ctx, 500)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != 600 || *scanned != 600 {
		t.Fatalf("Cleanup with limit 500 removed %d and read %d entries, want 600 and 600", total, *scanned)
	}
}
