package testkit

import (
	"sync"
	"time"
)

// Epoch is the instant a new Clock starts at: a fixed UTC time, so that
// keys and slot times in failures read the same on every run and machine.
var Epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// Clock is a settable clock, safe for concurrent use. Pass its Now to the
// engine (idem.WithClock), a runner or a store, then move it with Add or Set
// to expire leases and records without sleeping.
type Clock struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

// NewClock returns a clock reading Epoch.
func NewClock() *Clock { return &Clock{t: Epoch} }

// NewClockAt returns a clock reading t.
func NewClockAt(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
