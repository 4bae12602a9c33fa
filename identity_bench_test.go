package idem_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store/memory"
)

// BenchmarkFirstCallIdentity measures a first call on the memory store by
// its scope: one without ':' or '%' (its identity unchanged by the
// framing, nothing else to read), one with them and legacy reads on (one
// more store read, for records written before the framing), and the same
// with legacy reads off. docs/bench/ENGINE.md has the figures.
func BenchmarkFirstCallIdentity(b *testing.B) {
	op := func(context.Context) ([]byte, error) { return []byte(`{"id":"ch_1"}`), nil }
	for _, c := range []struct {
		name, scope string
		opts        []idem.Option
	}{
		{"plain-scope", "tenant-abc|POST /charges", nil},
		{"colon-scope", "cred:0123456789abcdef|POST /charges", nil},
		{"colon-scope-legacy-off", "cred:0123456789abcdef|POST /charges", []idem.Option{idem.WithLegacyReads(false)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1}, c.opts...)
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
