package keyhash

import (
	"strings"
	"testing"

	"github.com/idem-dev/idem/store"
)

func TestValid(t *testing.T) {
	for h, want := range map[string]bool{
		store.HashKey("scope", "key"):   true,
		strings.Repeat("a", 64):         true,
		strings.Repeat("a", 63):         false,
		strings.Repeat("A", 64):         false,
		strings.Repeat("g", 64):         false,
		"../" + strings.Repeat("a", 61): false,
		"":                              false,
	} {
		if got := Valid(h); got != want {
			t.Errorf("Valid(%q) = %v, want %v", h, got, want)
		}
	}
}
