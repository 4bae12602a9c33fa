package storetest

// Reservation: one holder of many racers, existing records handed back,
// stale holders taken over by a matching request only.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idem-dev/idem/store"
)

func testReserveAbsent(t *testing.T, h Harness) {
	s := newStore(t, h)
	req := request(uniqueKey(t))
	wantNotFound(t, s, req)
	res, err := s.Reserve(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acquired || res.TookOver {
		t.Fatalf("got %+v, want acquired without takeover", res)
	}
	got := mustGet(t, s, req)
	checkRecord(t, got, req.Record)
	checkTimes(t, h, got, req.Lease, req.TTL)
	if !got.CreatedAt.Equal(got.UpdatedAt) {
		t.Fatalf("a new record: created %v, updated %v", got.CreatedAt, got.UpdatedAt)
	}
}

func testReserveExisting(t *testing.T, h Harness) {
	s := newStore(t, h)
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	// Same key again, live lease, with and without a different fingerprint:
	// the store hands back the holder's record and acquires nothing.
	for _, fp := range []string{req.Record.Fingerprint, "sha256:other"} {
		again := request(req.Record.Key)
		again.Record.Fingerprint = fp
		res, err := s.Reserve(context.Background(), again)
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			t.Fatalf("second reserve acquired a held key (fingerprint %s)", fp)
		}
		checkRecord(t, res.Existing, req.Record)
		checkTimes(t, h, res.Existing, req.Lease, req.TTL)
	}
	// A completed record is handed back too, with its value.
	if err := s.Complete(context.Background(), complete(req, store.Succeeded, []byte("v1"))); err != nil {
		t.Fatal(err)
	}
	res, err := s.Reserve(context.Background(), request(req.Record.Key))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired || res.Existing.State != store.Succeeded || string(res.Existing.Value) != "v1" {
		t.Fatalf("reserve over a succeeded record: got %+v", res)
	}
	checkTimes(t, h, res.Existing, req.Lease, longTTL)
}

// race has n goroutines reserve the same key through the clients and returns
// how many acquired it.
func race(t *testing.T, clients []store.Store, key string, n int) (winners int, tokens map[uint64]int) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
		errs  []error
	)
	tokens = make(map[uint64]int)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := request(key)
			<-start
			res, err := clients[i%len(clients)].Reserve(context.Background(), req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case res.Acquired:
				winners++
				tokens[req.Record.Token]++
			default:
				tokens[res.Existing.Token]++
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d reserves failed, first: %v", len(errs), errs[0])
	}
	return winners, tokens
}

func clients(t *testing.T, h Harness, s store.Store) []store.Store {
	cs := []store.Store{s}
	if h.Peer != nil {
		p := h.Peer(t, s)
		t.Cleanup(func() { _ = p.Close() })
		cs = append(cs, p)
	}
	return cs
}

func testReserveRace(t *testing.T, h Harness) {
	s := newStore(t, h)
	cs := clients(t, h, s)
	for round := range 5 {
		key := uniqueKey(t)
		winners, tokens := race(t, cs, key, h.Racers)
		if winners != 1 {
			t.Fatalf("round %d: %d of %d racers acquired the key, want exactly 1", round, winners, h.Racers)
		}
		// Every loser saw the winner's record, not some other token.
		if len(tokens) != 1 {
			t.Fatalf("round %d: racers saw %d different tokens, want 1", round, len(tokens))
		}
	}
}

func testReserveRaceManyKeys(t *testing.T, h Harness) {
	s := newStore(t, h)
	cs := clients(t, h, s)
	const keys, perKey = 32, 8
	base := uniqueKey(t)
	var acquired [keys]atomic.Int32
	var failed atomic.Int32
	var wg sync.WaitGroup
	for i := range keys * perKey {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := i % keys
			req := request(fmt.Sprintf("%s-%d", base, k))
			res, err := cs[i%len(cs)].Reserve(context.Background(), req)
			if err != nil {
				failed.Add(1)
				return
			}
			if res.Acquired {
				acquired[k].Add(1)
				if err := cs[i%len(cs)].Complete(context.Background(), complete(req, store.Succeeded, []byte(req.Record.Key))); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d operations failed", n)
	}
	for k := range keys {
		if n := acquired[k].Load(); n != 1 {
			t.Errorf("key %d acquired %d times, want 1", k, n)
		}
	}
}

func testStaleTakeover(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := context.Background()
	req := leased(uniqueKey(t), shortLease)
	mustReserve(t, s, req)

	// Not stale yet (a long lease this time): no takeover.
	live := request(uniqueKey(t))
	mustReserve(t, s, live)
	res, err := s.Reserve(ctx, request(live.Record.Key))
	if err != nil || res.Acquired {
		t.Fatalf("takeover of a live lease: %+v, %v", res, err)
	}
	waitStale(t, s, req)
	// Stale, but the request forbids takeover, or differs in fingerprint or
	// binding: no takeover either.
	noTake := request(req.Record.Key)
	noTake.TakeOverStale = false
	otherFP := request(req.Record.Key)
	otherFP.Record.Fingerprint = "sha256:different"
	otherBinding := request(req.Record.Key)
	otherBinding.Record.Binding = "POST /refunds"
	for name, r := range map[string]store.ReserveRequest{"no takeover": noTake, "fingerprint": otherFP, "binding": otherBinding} {
		res, err := s.Reserve(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			t.Fatalf("%s: stale record taken over", name)
		}
		if res.Existing.State != store.InProgress || res.Existing.Token != req.Record.Token || !res.Existing.Stale() {
			t.Fatalf("%s: existing %+v", name, res.Existing)
		}
	}
	// Stale and matching: taken over with the new token and its lease.
	taker := request(req.Record.Key)
	res, err = s.Reserve(ctx, taker)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Acquired || !res.TookOver {
		t.Fatalf("stale takeover: %+v", res)
	}
	got := mustGet(t, s, req)
	if got.Token != taker.Record.Token || got.State != store.InProgress || got.Stale() {
		t.Fatalf("after takeover: %+v", got)
	}
	checkTimes(t, h, got, taker.Lease, taker.TTL)
}

func testStaleTakeoverRace(t *testing.T, h Harness) {
	s := newStore(t, h)
	cs := clients(t, h, s)
	key := uniqueKey(t)
	held := leased(key, shortLease)
	mustReserve(t, s, held)
	for _, c := range cs {
		waitStale(t, c, held)
	}
	winners, _ := race(t, cs, key, h.Racers)
	if winners != 1 {
		t.Fatalf("%d racers took over the stale record, want exactly 1", winners)
	}
}
