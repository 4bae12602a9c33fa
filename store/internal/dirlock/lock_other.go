//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package dirlock

import (
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/vfs"
)

// Lock takes Pebble's portable file lock (LockFileEx on Windows). Its
// failures are not classified, so any of them is reported as ErrLocked.
func Lock(path string) (io.Closer, error) {
	l, err := vfs.Default.Lock(path)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrLocked, err)
	}
	return l, nil
}
