package diskroom

import "golang.org/x/sys/unix"

// FreeBytes returns the room that an unprivileged writer has left on
// dir's filesystem.
func FreeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
