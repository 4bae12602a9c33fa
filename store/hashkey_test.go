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
		if got := store.LegacyHashKey(c.scope, c.key); got != c.want {
			t.Errorf("LegacyHashKey(%d-byte scope, %d-byte key) = %s, earlier releases stored %s", len(c.scope), len(c.key), got, c.want)
		}
		// A scope without '%' or ':' keeps its identity.
		if got := store.HashKey(c.scope, c.key); got != c.want {
			t.Errorf("HashKey(%d-byte scope, %d-byte key) = %s, earlier releases stored %s", len(c.scope), len(c.key), got, c.want)
		}
	}
	for _, scope := range []string{"tenant-abc|POST /charges", "cred:abc|POST /charges"} {
		if n := testing.AllocsPerRun(100, func() { store.HashKey(scope, "first-123") }); n > 1 {
			t.Errorf("HashKey(%q): %v allocations, want the string only", scope, n)
		}
	}
}

// TestHashKeyFramesScope: no two (scope, key) pairs share an identity,
// whatever ':' and '%' they hold, on both of HashKey's paths; the joined
// string that LegacyHashKey hashes does not separate them.
func TestHashKeyFramesScope(t *testing.T) {
	long := strings.Repeat(":", 120) // escaped past the stack buffer
	pairs := [][2]string{
		{"alice", "x:y"}, {"alice:x", "y"}, {"alice:x:y", ""}, {"", "alice:x:y"},
		{"alice%3Ax", "y"}, {"alice%", "3Ax:y"}, {"a%25", "b"}, {"a%", "25:b"},
		{long, "k"}, {long + ":", "k"}, {long[:119], ":k"}, {long, ":k"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		h := store.HashKey(p[0], p[1])
		if q, dup := seen[h]; dup {
			t.Errorf("HashKey(%q, %q) = HashKey(%q, %q)", p[0], p[1], q[0], q[1])
		}
		seen[h] = p
	}
	if store.LegacyHashKey("alice", "x:y") != store.LegacyHashKey("alice:x", "y") {
		t.Error("LegacyHashKey separates what it was known to join: the test no longer shows the ambiguity")
	}
	// Both paths hash the same escaped string.
	esc := strings.NewReplacer("%", "%25", ":", "%3A")
	for _, p := range pairs {
		if got, want := store.HashKey(p[0], p[1]), store.LegacyHashKey(esc.Replace(p[0]), p[1]); got != want {
			t.Errorf("HashKey(%q, %q) = %s, want the legacy hash of the escaped scope, %s", p[0], p[1], got, want)
		}
	}
}
