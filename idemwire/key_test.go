package idemwire

import (
	"regexp"
	"testing"
)

func TestNewKey(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		u := NewKey()
		if !re.MatchString(u) {
			t.Fatalf("NewKey() = %q, not a version 4 UUID", u)
		}
		if seen[u] {
			t.Fatalf("NewKey() repeated %q", u)
		}
		seen[u] = true
	}
}
