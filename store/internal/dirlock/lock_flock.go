//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package dirlock

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// Lock takes an exclusive flock on path. A flock belongs to the open
// file, not the process, so a second Open in the same process is refused
// too, and the kernel drops it when the process dies, even by SIGKILL.
//
// A lock just released can still be held for a moment by a child that this
// process is starting: between fork and exec the child has a copy of every
// descriptor, close-on-exec ones included, and a flock lives until its last
// copy closes. So a refused lock is tried again for retryFor before
// ErrLocked is returned; a real holder holds it longer than that.
func Lock(path string) (io.Closer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(retryFor)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, ErrLocked
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// retryFor is how long Lock tries again a lock that is held.
const retryFor = 250 * time.Millisecond
