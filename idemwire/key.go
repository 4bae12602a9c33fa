package idemwire

import (
	"crypto/rand"
	"encoding/hex"
)

// NewKey returns a random (version 4) UUID (RFC 9562, section 5.4), the
// key idem's clients make for a request that has none: one per user
// intent, reused for every retry of it.
func NewKey() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand's documented contract)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
