package idem

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultMaxKeyBytes is the longest key accepted when a policy sets none
// (Stripe's 255 and the IETF draft's examples fit).
const DefaultMaxKeyBytes = 255

// ValidateKey trims white space from key and checks it: non-empty, at most
// maxBytes bytes (DefaultMaxKeyBytes when maxBytes <= 0), valid UTF-8 and
// printable. It returns the trimmed key, or a *KeyError matching
// ErrInvalidKey.
func ValidateKey(key string, maxBytes int) (string, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxKeyBytes
	}
	k := strings.TrimSpace(key)
	if k != "" && len(k) <= maxBytes && printableASCII(k) {
		// The keys clients send (UUIDs, ULIDs, hex): valid UTF-8 and
		// printable by construction, without decoding runes.
		return k, nil
	}
	switch {
	case k == "":
		return "", &KeyError{Reason: "is empty"}
	case len(k) > maxBytes:
		return "", &KeyError{Reason: "is longer than " + strconv.Itoa(maxBytes) + " bytes"}
	case !utf8.ValidString(k):
		return "", &KeyError{Reason: "is not valid UTF-8"}
	}
	for _, r := range k {
		// Control characters (and other non-printables such as U+2028) would
		// break logs, headers and the stores' text columns.
		if !unicode.IsPrint(r) && r != ' ' {
			return "", &KeyError{Reason: "contains a non-printable character"}
		}
	}
	return k, nil
}

// printableASCII reports whether s holds only bytes 0x20-0x7e, which
// unicode.IsPrint accepts one and all.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
