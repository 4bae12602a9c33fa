//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package pebblestore

import (
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/vfs"
)

// lockDir takes Pebble's portable file lock (LockFileEx on Windows). Its
// failures are not classified, so any of them is reported as ErrLocked.
func lockDir(path string) (io.Closer, error) {
	l, err := vfs.Default.Lock(path)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrLocked, err)
	}
	return l, nil
}
