package seal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/postgres"
)

func engine(s store.Store, c *testkit.Clock) *idem.Engine {
	return idem.New(s, idem.Policy{Lease: 10 * time.Second, CleanupInterval: -1}, idem.WithClock(c.Now))
}

// charge is the payments API's operation: it counts its executions.
func charge(runs *atomic.Int32, v string) idem.Func {
	return func(context.Context) ([]byte, error) {
		runs.Add(1)
		return []byte(v), nil
	}
}

// A rotation goes old -> old,new -> new,old -> new. At every step a key
// charged before replays, and runs no second time.
func TestRotationReplaysOldRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.NewClock()
	inner := memory.New(memory.WithClock(c.Now))
	var runs atomic.Int32
	call := func(key string) idem.Call {
		return idem.Call{Scope: "tenant-7|POST /v1/charges", Key: key, Fingerprint: "fp-" + key, RequestID: "req-" + key}
	}

	steps := []string{secretA, secretA + "," + secretB, secretB + "," + secretA}
	for i, secret := range steps {
		eng := engine(seal.Wrap(inner, mustRing(t, secret)), c)
		// Every key charged at an earlier step replays.
		for j := range i {
			key := fmt.Sprintf("charge-%d", j)
			res, err := eng.Do(ctx, call(key), charge(&runs, "second run"))
			if err != nil || !res.Replayed || string(res.Value) != "ch_"+key || res.RequestID != "req-"+key {
				t.Fatalf("step %d (%s): %s: %+v, %v; want the replay of step %d", i, secret, key, res, err, j)
			}
		}
		key := fmt.Sprintf("charge-%d", i)
		if res, err := eng.Do(ctx, call(key), charge(&runs, "ch_"+key)); err != nil || res.Replayed {
			t.Fatalf("step %d: first call: %+v, %v", i, res, err)
		}
		if got, err := eng.Lookup(ctx, call(key).Scope, key); err != nil || got.Key != key {
			t.Fatalf("step %d: Lookup: %+v, %v", i, got, err)
		}
	}
	if n := runs.Load(); n != int32(len(steps)) {
		t.Fatalf("%d executions for %d keys", n, len(steps))
	}

	// Dropping the old secret before its records expired makes them
	// invisible (the documented hazard); records of the new one replay.
	eng := engine(seal.Wrap(inner, mustRing(t, secretB)), c)
	if res, err := eng.Do(ctx, call("charge-2"), charge(&runs, "again")); err != nil || !res.Replayed {
		t.Fatalf("a record of the new secret: %+v, %v", res, err)
	}
	if _, err := eng.Lookup(ctx, call("charge-0").Scope, "charge-0"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a record indexed by a dropped secret: %v, want ErrNotFound", err)
	}
}

// While a rotation rolls out, gateways run with the old secret first and
// with the new one first over one store. However their calls of one key
// interleave, it runs at most once: over the memory store, and over
// PostgreSQL with a connection pool per gateway.
func TestRotationRaceRunsOnce(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		inner := memory.New()
		rotationRace(t, inner, inner, 200)
	})
	t.Run("postgres", func(t *testing.T) {
		a := pgStore(t, pgPool(t))
		b, err := postgres.New(pgPool(t), a.Options())
		if err != nil {
			t.Fatal(err)
		}
		rotationRace(t, a, b, 40)
	})
}

func rotationRace(t *testing.T, innerA, innerB store.Store, keys int) {
	ctx := context.Background()
	c := testkit.NewClock()
	engines := []*idem.Engine{
		engine(seal.Wrap(innerA, mustRing(t, secretA+","+secretB)), c),
		engine(seal.Wrap(innerB, mustRing(t, secretB+","+secretA)), c),
	}
	const racers = 8
	for k := range keys {
		key := fmt.Sprintf("order-%d", k)
		var runs atomic.Int32
		var wg sync.WaitGroup
		for r := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := engines[r%2].Do(ctx, idem.Call{Scope: "s", Key: key}, charge(&runs, "ok"))
				if err != nil && !errors.Is(err, idem.ErrInProgress) {
					t.Errorf("%s: %v", key, err)
				}
			}()
		}
		wg.Wait()
		if n := runs.Load(); n > 1 {
			t.Fatalf("%s ran %d times", key, n)
		}
		// Whether or not both racers stepped back, one more call settles it.
		if _, err := engines[k%2].Do(ctx, idem.Call{Scope: "s", Key: key}, charge(&runs, "ok")); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("%s ran %d times", key, n)
		}
	}
}

// A stale key taken over after a rotation is sealed by the new secret under
// the old secret's identity. Rolled back to a ring without the new secret,
// that record fails with ErrUnknownKey, naming the key, and nothing runs.
func TestUnknownKeyFailsClearly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.NewClock()
	inner := memory.New(memory.WithClock(c.Now))
	old := engine(seal.Wrap(inner, mustRing(t, secretA)), c)
	rotated := engine(seal.Wrap(inner, mustRing(t, secretB+","+secretA)), c)
	var runs atomic.Int32
	call := idem.Call{Scope: "s", Key: "refund-9"}

	// The first holder reserves the key with the old secret, then dies.
	_, err := seal.Wrap(inner, mustRing(t, secretA)).Reserve(ctx, store.ReserveRequest{Lease: time.Second, TTL: time.Hour, Record: store.Record{
		KeyHash: store.HashKey(call.Scope, call.Key), Scope: call.Scope, Key: call.Key, State: store.InProgress,
		Token: 1,
	}})
	if err != nil {
		t.Fatal(err)
	}
	c.Add(time.Minute)
	res, err := rotated.Do(ctx, call, charge(&runs, "refunded"))
	if err != nil || !res.TookOver {
		t.Fatalf("takeover after rotation: %+v, %v", res, err)
	}
	_, err = old.Do(ctx, call, charge(&runs, "refunded twice"))
	newID := mustRing(t, secretB).IDs()[0]
	if !errors.Is(err, seal.ErrUnknownKey) || !strings.Contains(err.Error(), newID) {
		t.Fatalf("rolled-back ring: %v; want ErrUnknownKey naming %s", err, newID)
	}
	if _, err := old.Lookup(ctx, call.Scope, call.Key); !errors.Is(err, seal.ErrUnknownKey) {
		t.Fatalf("Lookup: %v", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	// The rotated ring still replays it.
	if res, err := rotated.Do(ctx, call, charge(&runs, "x")); err != nil || !res.Replayed || string(res.Value) != "refunded" {
		t.Fatalf("replay: %+v, %v", res, err)
	}
}
