package pebblestore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// benchValue is a small stored response, as an API returns.
var benchValue = []byte(`{"status":201,"headers":{"Content-Type":["application/json"]},"body":"eyJpZCI6ImNoXzEyMyIsImFtb3VudCI6MTAwMH0="}`)

func benchRequest(run, i uint64) store.ReserveRequest {
	key := fmt.Sprintf("bench-%d-%d", run, i)
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("tenant-1", key), Scope: "tenant-1", Key: key,
			Fingerprint: "sha256:" + strings.Repeat("ab", 32), Binding: "POST /v1/charges",
			State: store.InProgress, Token: i, RequestID: "req-" + key,
		},
		Lease: time.Minute, TTL: 24 * time.Hour,
	}
}

// BenchmarkPairs runs durable reserve+complete pairs through the store
// ("store") and the same synced commits on the bare engine ("pebble", see
// pebblePairs), at concurrency 1 and 64, side by side so that both see the
// same machine.
func BenchmarkPairs(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("c%d/store", conc), func(b *testing.B) { storetest.RunRate(b, conc, "pairs/s", storePairs(b)) })
		b.Run(fmt.Sprintf("c%d/pebble", conc), func(b *testing.B) { storetest.RunRate(b, conc, "pairs/s", pebblePairs(b)) })
	}
}

func storePairs(b *testing.B) func(i uint64) error {
	s, err := Open(b.TempDir(), quiet)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	run := benchRun.Add(1)
	return func(i uint64) error {
		req := benchRequest(run, i)
		if _, err := s.Reserve(ctx, req); err != nil {
			return err
		}
		return s.Complete(ctx, store.Completion{
			Fence: store.Fence{KeyHash: req.Record.KeyHash, Scope: req.Record.Scope, Token: req.Record.Token},
			State: store.Succeeded, Value: benchValue, TTL: 24 * time.Hour,
		})
	}
}
