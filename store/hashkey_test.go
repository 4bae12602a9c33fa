package store_test

import (
	"strings"
	"testing"

	"github.com/idem-dev/idem/store"
)

// TestHashKeyStable pins key hashes to what earlier releases stored, on
// both of HashKey's paths (a key that fits its stack buffer and one that
// does not): records written before an upgrade must still be found.
func TestHashKeyStable(t *testing.T) {
	for _, c := range []struct{ scope, key, want string }{
		{"a", "b", "6783a31eabf68ccc0660f935c0826282bdd2241f3a80a9f2d10d59aea9ebb5d8"},
		{strings.Repeat("s", 200), strings.Repeat("k", 100), "1a65a2bd0f036226497e133ba1a0574e0eea2c6fbd94f063f813b8bd5e711f7e"},
	} {
		if got := store.HashKey(c.scope, c.key); got != c.want {
			t.Errorf("HashKey(%d-byte scope, %d-byte key) = %s, earlier releases stored %s", len(c.scope), len(c.key), got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { store.HashKey("tenant:abc/POST /charges", "first-123") }); n > 1 {
		t.Errorf("HashKey: %v allocations, want the string only", n)
	}
}
