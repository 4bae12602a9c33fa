package idem

import (
	"testing"
	"unicode"
)

// TestPrintableASCII: the fast path of ValidateKey accepts exactly the
// ASCII bytes that the rune-by-rune check accepts.
func TestPrintableASCII(t *testing.T) {
	for c := range 0x80 {
		s := string(rune(c))
		if got, want := printableASCII(s), unicode.IsPrint(rune(c)); got != want {
			t.Errorf("%#x: printableASCII %v, unicode.IsPrint %v", c, got, want)
		}
	}
	if printableASCII("ab\u00e9") {
		t.Error("a multi-byte rune passed as ASCII")
	}
}
