package idem_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/storetest"
)

// BenchmarkFirstCallIdentity measures a first call on the memory store by
// its scope: one without ':' or '%' (its identity unchanged by the
// framing, nothing else to read), one with them and legacy reads on (one
// more store read, for records written before the framing: a store that
// may hold them, storetest.Earlier), and the same with legacy reads off
// (the memory store's default: it holds none). docs/bench/ENGINE.md has
// the figures.
func BenchmarkFirstCallIdentity(b *testing.B) {
	op := func(context.Context) ([]byte, error) { return []byte(`{"id":"ch_1"}`), nil }
	for _, c := range []struct {
		name, scope string
		earlier     bool
	}{
		{"plain-scope", "tenant-abc|POST /charges", false},
		{"colon-scope", "cred:0123456789abcdef|POST /charges", true},
		{"colon-scope-legacy-off", "cred:0123456789abcdef|POST /charges", false},
	} {
		b.Run(c.name, func(b *testing.B) {
			var st store.Store = memory.New()
			if c.earlier {
				st = storetest.Earlier(st)
			}
			eng := idem.New(st, idem.Policy{CleanupInterval: -1})
			defer eng.Close()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := eng.Do(bg, idem.Call{Scope: c.scope, Key: "k-" + strconv.Itoa(i), Fingerprint: "fp"}, op); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
