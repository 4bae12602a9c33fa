package file

import (
	"fmt"
	"testing"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
	pebblestore "github.com/idem-dev/idem/store/pebble"
	"github.com/idem-dev/idem/store/storetest"
)

// BenchmarkPairs runs durable reserve+complete pairs through this store
// ("log") and, side by side in the same run, through the Pebble store of
// earlier versions ("pebble"), at concurrency 1 and 64. Both report
// pairs/s and CPU µs per pair; docs/bench quotes them.
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
				storetest.RunRate(b, conc, "pairs/s", localtest.Pairs(s))
			})
		}
	}
}

// BenchmarkEngine runs idem's engine on the embedded store: durable first
// executions and replays at concurrency 1 and 64.
func BenchmarkEngine(b *testing.B) { localtest.BenchEngine(b, harness) }
