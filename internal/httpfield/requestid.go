package httpfield

import (
	"encoding/hex"
	"math/rand/v2"
)

// NewRequestID returns a random 128-bit request ID in hex, as the
// middleware and the gateway give requests that arrive without one.
func NewRequestID() string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		u := rand.Uint64()
		for j := range 8 {
			b[i+j] = byte(u >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}
