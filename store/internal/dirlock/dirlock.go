// Package dirlock holds the lock that gives one process a store directory
// (the embedded stores' idem.lock).
package dirlock

import "errors"

// ErrLocked is returned by Lock when another process, or another holder in
// this one, has the lock.
var ErrLocked = errors.New("another process holds the store directory")
