package file

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	pebblestore "github.com/idem-dev/idem/store/pebble"
	"github.com/idem-dev/idem/store/storetest"
)

// benchValue is a small stored response, as an API returns.
var benchValue = []byte(`{"status":201,"headers":{"Content-Type":["application/json"]},"body":"eyJpZCI6ImNoXzEyMyIsImFtb3VudCI6MTAwMH0="}`)

var benchRun atomic.Uint64

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

// BenchmarkPairs runs durable reserve+complete pairs through this store
// ("log") and, side by side in the same run, through the Pebble store of
// earlier versions ("pebble"), at concurrency 1 and 64. Both report
// pairs/s and CPU µs per pair; the package doc quotes them.
func BenchmarkPairs(b *testing.B) {
	open := map[string]func(b *testing.B) store.Store{
		"log": func(b *testing.B) store.Store {
			s, err := Open(b.TempDir(), quiet)
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"pebble": func(b *testing.B) store.Store {
			s, err := pebblestore.Open(b.TempDir(), pebblestore.Options{Logger: quiet.Logger})
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
	}
	for _, conc := range []int{1, 64} {
		for _, name := range []string{"log", "pebble"} {
			b.Run(fmt.Sprintf("c%d/%s", conc, name), func(b *testing.B) {
				s := open[name](b)
				defer s.Close()
				storetest.RunRate(b, conc, "pairs/s", pairs(s))
			})
		}
	}
}

func pairs(s store.Store) func(i uint64) error {
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

// BenchmarkEngine runs idem's engine on the embedded store: durable first
// executions and replays at concurrency 1 and 64.
func BenchmarkEngine(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store {
		s, err := Open(b.TempDir(), quiet)
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
}
