package localtest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// BenchValue is a small stored response, as an API returns.
var BenchValue = []byte(`{"status":201,"headers":{"Content-Type":["application/json"]},"body":"eyJpZCI6ImNoXzEyMyIsImFtb3VudCI6MTAwMH0="}`)

// BenchRequest is the reservation of key i of benchmark run run, under
// the engine's default policy (on_stale: retry: TakeOverStale).
func BenchRequest(run, i uint64) store.ReserveRequest {
	key := fmt.Sprintf("bench-%d-%d", run, i)
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("tenant-1", key), Scope: "tenant-1", Key: key,
			Fingerprint: "sha256:" + strings.Repeat("ab", 32), Binding: "POST /v1/charges",
			State: store.InProgress, Token: i, RequestID: "req-" + key,
		},
		Lease: time.Minute, TTL: 24 * time.Hour, TakeOverStale: true,
	}
}

var benchRun atomic.Uint64

// Pairs is a step of storetest.RunRate: a durable reserve+complete pair
// of a new key on s.
func Pairs(s store.Store) func(i uint64) error {
	ctx := context.Background()
	run := benchRun.Add(1)
	return func(i uint64) error {
		req := BenchRequest(run, i)
		if _, err := s.Reserve(ctx, req); err != nil {
			return err
		}
		return s.Complete(ctx, store.Completion{
			Fence: store.Fence{KeyHash: req.Record.KeyHash, Scope: req.Record.Scope, Token: req.Record.Token},
			State: store.Succeeded, Value: BenchValue, TTL: 24 * time.Hour,
		})
	}
}

// BenchEngine runs idem's engine on the store: durable first executions
// and replays at concurrency 1 and 64 (storetest.Bench).
func BenchEngine(b *testing.B, h Harness) {
	storetest.Bench(b, func(b *testing.B) store.Store {
		s, err := h.Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
}
