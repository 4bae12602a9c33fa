package diskroom

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-dev/idem/store"
)

// DefaultHeadroom is the headroom of a store whose options leave it zero:
// the room the embedded stores have always wanted free before they write
// again after a full disk.
const DefaultHeadroom = 1 << 20

// Every is how long a reading of the free room is used before the next.
const Every = 10 * time.Millisecond

// Gate admits new work while the room left on a filesystem is at least
// its headroom. It is safe for concurrent use.
type Gate struct {
	headroom int64
	free     func() (int64, error)
	start    time.Time // the origin of at, on the monotonic clock

	written atomic.Int64 // bytes the store reported written, in all
	last    atomic.Pointer[reading]
	mu      sync.Mutex // one reader of the filesystem at a time
}

// reading is one look at the filesystem.
type reading struct {
	at      time.Duration // since start
	free    int64
	err     error
	written int64 // Gate.written when it was taken
}

// New returns a gate that wants headroom bytes free (0 or less means
// DefaultHeadroom) as free reports them.
func New(headroom int64, free func() (int64, error)) *Gate {
	if headroom <= 0 {
		headroom = DefaultHeadroom
	}
	return &Gate{headroom: headroom, free: free, start: time.Now()}
}

// Headroom is the room the gate wants free.
func (g *Gate) Headroom() int64 { return g.headroom }

// Wrote tells the gate that the store wrote n bytes to the filesystem,
// which the next reading will show and the current one does not.
func (g *Gate) Wrote(n int) { g.written.Add(int64(n)) }

// Free is the room left as last read, less what was written since; the
// reading is renewed once it is Every old.
func (g *Gate) Free() (int64, error) {
	r := g.last.Load()
	if r == nil || time.Since(g.start)-r.at >= Every {
		r = g.read()
	}
	if r.err != nil {
		return 0, r.err
	}
	return r.free - (g.written.Load() - r.written), nil
}

// read reads the filesystem, unless another caller just did.
func (g *Gate) read() *reading {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Since(g.start)
	if r := g.last.Load(); r != nil && now-r.at < Every {
		return r
	}
	r := &reading{at: now, written: g.written.Load()}
	r.free, r.err = g.free()
	g.last.Store(r)
	return r
}

// Forget drops the last reading, so that the next check reads the
// filesystem (room given back at once: a file removed).
func (g *Gate) Forget() { g.last.Store(nil) }

// Admit returns nil if new work may start: the room left is at least the
// headroom, or the filesystem cannot tell (the store then learns of a
// full disk from its writes). Otherwise an error matching
// store.ErrNoSpace and syscall.ENOSPC.
func (g *Gate) Admit() error {
	free, err := g.Free()
	if err != nil || free >= g.headroom {
		return nil
	}
	return fmt.Errorf("%w: %d bytes free on the store's filesystem, less than the %d its next outcome may need (its headroom: the gateway's max_response_bytes and a record's overhead): %w",
		store.ErrNoSpace, max(free, 0), g.headroom, syscall.ENOSPC)
}
