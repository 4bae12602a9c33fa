package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

// TestReplayWritesNothing answers 10,000 reservations of a completed key
// and 10,000 of a held one, and checks that none of them wrote: the row's
// xmin and xmax are unchanged (a row lock, as ON CONFLICT DO UPDATE takes
// even when its WHERE is false, sets xmax to the locker's transaction).
// The server's WAL position is logged too; other clients of the shared test
// server move it, so it is reported, not asserted.
func TestReplayWritesNothing(t *testing.T) {
	t.Parallel()
	pool := testPool(t, 8)
	s := newTestStore(t, pool, freshSchema(t, pool))
	ctx := context.Background()
	done, held := request("done", 1), request("held", 2)
	for _, r := range []store.ReserveRequest{done, held} {
		if res, err := s.Reserve(ctx, r); err != nil || !res.Acquired {
			t.Fatalf("reserve %s: %+v %v", r.Record.Key, res, err)
		}
	}
	if err := s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: done.Record.KeyHash, Token: 1},
		State: store.Succeeded, Value: []byte("the answer"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	versions := func(r store.ReserveRequest) string {
		kh, _ := keyHash(r.Record.KeyHash)
		var v string
		if err := pool.QueryRow(ctx, `SELECT xmin::text || '/' || xmax::text FROM `+s.opts.qualified()+` WHERE key_hash = $1`, kh).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	lsn := func() string {
		var v string
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := map[string]string{"done": versions(done), "held": versions(held)}
	lsn0 := lsn()
	const n, workers = 10000, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				for _, r := range []store.ReserveRequest{done, held} {
					r.Record.Token = uint64(1000 + i)
					res, err := s.Reserve(ctx, r)
					if err == nil && (res.Acquired || res.Existing.Token != uint64(map[string]int{"done": 1, "held": 2}[r.Record.Key])) {
						t.Errorf("reserve %s: %+v", r.Record.Key, res)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("WAL position %s -> %s over %d replays and %d conflicts (the server is shared: other clients move it too)", lsn0, lsn(), n, n)
	for name, r := range map[string]store.ReserveRequest{"done": done, "held": held} {
		if after := versions(r); after != before[name] {
			t.Fatalf("%s: row xmin/xmax %s -> %s: answering a reservation wrote to the row", name, before[name], after)
		}
	}
}
