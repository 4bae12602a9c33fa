package pebblestore

import (
	"fmt"
	"testing"

	"github.com/idem-dev/idem/store/internal/localtest"
	"github.com/idem-dev/idem/store/storetest"
)

// BenchmarkPairs runs durable reserve+complete pairs through the store
// ("store"; "onesync" with Options.OneSync, the gateway's setting) and the
// same synced commits on the bare engine ("pebble", see pebblePairs), at
// concurrency 1 and 64, side by side so that all see the same machine.
func BenchmarkPairs(b *testing.B) {
	oneSync := quiet
	oneSync.OneSync = true
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("c%d/store", conc), func(b *testing.B) { storetest.RunRate(b, conc, "pairs/s", storePairs(b, quiet)) })
		b.Run(fmt.Sprintf("c%d/onesync", conc), func(b *testing.B) { storetest.RunRate(b, conc, "pairs/s", storePairs(b, oneSync)) })
		b.Run(fmt.Sprintf("c%d/pebble", conc), func(b *testing.B) { storetest.RunRate(b, conc, "pairs/s", pebblePairs(b)) })
	}
}

func storePairs(b *testing.B, o Options) func(i uint64) error {
	s, err := Open(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return localtest.Pairs(s)
}

// BenchmarkEngine runs idem's engine on the embedded store: durable first
// executions and replays at concurrency 1 and 64.
func BenchmarkEngine(b *testing.B) { localtest.BenchEngine(b, harness) }
