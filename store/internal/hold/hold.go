// Package hold bounds how long an embedded store keeps a reservation in
// memory instead of writing it (Options.OneSync with a reservation that
// may be taken over once stale).
//
// A reservation kept in memory lets a call that completes quickly write
// one record instead of two. A call that does not (a slow upstream) must
// still leave a trace that a process kill cannot erase: an operator
// looks for keys whose outcome is unknown after a crash. So a
// reservation held longer than the bound is written, without waiting for
// a sync: once in the operating system's hands it survives the process,
// though not a power loss before the next sync, which the stores' crash
// model allows. Both embedded stores take the bound and its sweeper from
// here.
package hold

import (
	"sync"
	"sync/atomic"
	"time"
)

// Default is the bound when a store's option is zero: longer than most
// upstream calls a first call makes, so they still write one record, and
// short enough that a kill during a slow one finds the key in progress.
const Default = 50 * time.Millisecond

// Bound returns the bound that option d sets: zero means Default, and a
// negative value, returned as it is, means no reservation is kept at all
// (see AtOnce).
func Bound(d time.Duration) time.Duration {
	if d == 0 {
		return Default
	}
	return d
}

// AtOnce reports whether bound d keeps no reservation in memory.
func AtOnce(d time.Duration) bool { return d < 0 }

// Sweeper calls a store's sweep every half bound in a goroutine of its
// own, so that a reservation is written at most one and a half bounds
// after it was taken. It counts its sweeps: a store marks a reservation
// it keeps with Now, an atomic load where a reading of the clock would
// cost more on a first call's path, and writes it once Due. The zero
// value is not usable: see Start.
type Sweeper struct {
	ticks atomic.Uint32 // sweeps started
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// Now returns the count of sweeps started, to mark a reservation kept
// now.
func (w *Sweeper) Now() uint32 { return w.ticks.Load() }

// Due reports whether a reservation marked kept (Now) is held longer than
// the bound at sweep now: sweeps run every half bound, so sweep kept+1
// may come at once, and sweep kept+3 comes at least a bound later.
func Due(kept, now uint32) bool { return now-kept >= 3 }

// Start starts calling sweep every half of bound (at least every
// millisecond) until Stop, with the sweep's count. sweep writes the
// reservations Due; it runs in one goroutine, never concurrently with
// itself.
func Start(bound time.Duration, sweep func(now uint32)) *Sweeper {
	w := &Sweeper{stop: make(chan struct{}), done: make(chan struct{})}
	every := max(bound/2, time.Millisecond)
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				sweep(w.ticks.Add(1))
			}
		}
	}()
	return w
}

// Stop ends the sweeps and returns once the last has returned. It may be
// called more than once, and on a nil Sweeper (a store that keeps
// nothing in memory).
func (w *Sweeper) Stop() {
	if w == nil {
		return
	}
	w.once.Do(func() { close(w.stop) })
	<-w.done
}
