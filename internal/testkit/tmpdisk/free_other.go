//go:build !linux

package tmpdisk

import "testing"

const supported = false

// Free is not implemented outside Linux, where Mount skips the test.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	t.Skip("needs Linux")
	return 0
}
