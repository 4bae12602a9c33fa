// Package monoclock is the clock of the embedded stores (memory, file,
// Pebble): wall time read once, when the store opens, and carried forward
// on the monotonic clock. Leases and expiry within one run are then judged
// on a clock that a change of the machine's wall clock (an NTP step, a
// manual change, a VM resumed from suspend) does not move, so such a jump
// neither takes over a live holder nor keeps a dead holder's key blocked.
// Across restarts the wall clock is read again: records written before a
// jump expire by the wall clock, which is the only one that outlives the
// process.
package monoclock

import "time"

// Clock reads the time; make one with New or Stepped.
type Clock struct {
	anchor time.Time // wall and monotonic reading at the start
	wall   time.Time // the wall reading at the start, without the monotonic one
	step   func() time.Time
}

// New returns a clock that starts at wall() and advances on the monotonic
// clock; a nil wall means time.Now. Stores call it when they open.
func New(wall func() time.Time) *Clock {
	w := time.Now
	if wall != nil {
		w = wall
	}
	return &Clock{anchor: time.Now(), wall: w().Round(0)}
}

// Stepped returns a clock that reads now on every call: tests use it to
// move time without sleeping, and to jump it.
func Stepped(now func() time.Time) *Clock { return &Clock{step: now} }

// Now returns the current time: the start's wall reading plus the time
// elapsed since on the monotonic clock. The result carries no monotonic
// reading, so that it compares alike with times read back from disk.
func (c *Clock) Now() time.Time {
	if c.step != nil {
		return c.step().Round(0)
	}
	return c.wall.Add(time.Since(c.anchor))
}
