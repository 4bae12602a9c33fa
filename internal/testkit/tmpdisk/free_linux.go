package tmpdisk

import (
	"testing"

	"golang.org/x/sys/unix"
)

const supported = true

// Free returns the bytes free on dir's filesystem.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}
