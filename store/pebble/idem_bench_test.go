package pebblestore

import (
	"testing"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

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
