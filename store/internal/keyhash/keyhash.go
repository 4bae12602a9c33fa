// Package keyhash checks the key hashes that the network stores put in
// their item and object names: anything but what store.HashKey produces
// could name another record.
package keyhash

// Valid reports whether h is 64 lowercase hex digits, the only form
// store.HashKey produces.
func Valid(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
