package seal_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// BenchmarkReserveComplete measures one reserve+complete pair with a 1 KiB
// response, on the bare memory store and through the seal with one secret
// and with two (a rotation in progress, which reads the older identity
// twice per reservation). Run them side by side and compare:
//
//	go test -run - -bench ReserveComplete -count 6 ./seal/ | benchstat -col /store -
func BenchmarkReserveComplete(b *testing.B) {
	benchWraps(b, func(b *testing.B) store.Store { return memory.New() })
}

// BenchmarkReserveCompletePostgres is the same on PostgreSQL, where the
// seal's cost is set against a store's real round trips.
func BenchmarkReserveCompletePostgres(b *testing.B) {
	pool := pgPool(b)
	benchWraps(b, func(b *testing.B) store.Store { return pgStore(b, pool) })
}

func benchWraps(b *testing.B, open func(*testing.B) store.Store) {
	for _, tc := range []struct {
		name string
		wrap func(store.Store) store.Store
	}{
		{"store=bare", func(s store.Store) store.Store { return s }},
		{"store=sealed", func(s store.Store) store.Store { return seal.Wrap(s, mustRing(b, secretA)) }},
		{"store=sealed-rotating", func(s store.Store) store.Store { return seal.Wrap(s, mustRing(b, secretB+","+secretA)) }},
	} {
		b.Run(tc.name, func(b *testing.B) { benchPairs(b, tc.wrap(open(b))) })
	}
}

func benchPairs(b *testing.B, s store.Store) {
	value := make([]byte, 1024)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		key := "order-" + strconv.Itoa(i)
		r := store.Record{
			KeyHash: store.HashKey("tenant-7", key), Scope: "tenant-7", Key: key,
			Fingerprint: "sha256:0123456789abcdef", Binding: "POST /v1/charges", State: store.InProgress,
			Token: uint64(i), RequestID: "req-" + key,
		}
		if res, err := s.Reserve(ctx, store.ReserveRequest{Record: r, Lease: time.Minute, TTL: time.Hour}); err != nil || !res.Acquired {
			b.Fatal(res, err)
		}
		f := store.Fence{KeyHash: r.KeyHash, Scope: r.Scope, Token: r.Token}
		if err := s.Complete(ctx, store.Completion{Fence: f, State: store.Succeeded, Value: value, TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
}
