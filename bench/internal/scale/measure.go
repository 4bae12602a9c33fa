package scale

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/idem-dev/idem/bench/internal/results"
	"github.com/idem-dev/idem/store"
)

// The operations measured.
const (
	// OpReserveNew: Reserve of a key never seen, a first call.
	OpReserveNew = "reserve new key"
	// OpReserveExisting: Reserve of a live key, a retry (the store
	// answers with the record).
	OpReserveExisting = "reserve existing key"
)

// Scope is the scope of every record the scale runs write.
const Scope = "scale"

// LiveKey is the key of live record number i; a loader writes records
// with these keys so that OpReserveExisting can pick one at random.
func LiveKey(i int) string { return fmt.Sprintf("live-%d", i) }

// record returns the reservation of key, living ttl on the store's clock
// (its lease as long).
func record(key string, ttl time.Duration) store.ReserveRequest {
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey(Scope, key), Scope: Scope, Key: key,
			Fingerprint: "fp", Binding: "POST /charges", State: store.InProgress,
			Token: rand.Uint64() | 1, RequestID: "req-" + key,
		},
		Lease: ttl,
		TTL:   ttl,
	}
}

var probe uint64

// measureReserve times samples sequential Reserve calls: one client, so
// that the figures are the store's latency and not queueing.
func measureReserve(ctx context.Context, st store.Store, op string, samples, live int) (results.Latency, error) {
	lat := make([]time.Duration, 0, samples)
	for range samples {
		var key string
		if op == OpReserveNew {
			probe++
			key = fmt.Sprintf("probe-%d", probe)
		} else {
			key = LiveKey(rand.IntN(live))
		}
		req := record(key, 24*time.Hour)
		start := time.Now()
		res, err := st.Reserve(ctx, req)
		d := time.Since(start)
		if err != nil {
			return results.Latency{}, err
		}
		if res.Acquired != (op == OpReserveNew) {
			return results.Latency{}, fmt.Errorf("%s %q: acquired %v", op, key, res.Acquired)
		}
		lat = append(lat, d)
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	return results.Latency{Op: op, Samples: samples, P50: q(0.50), P99: q(0.99), P999: q(0.999)}, nil
}
