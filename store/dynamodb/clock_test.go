package dynamodbstore

import (
	"testing"
	"time"
)

// t0 is a whole second on the server's clock.
var t0 = time.Date(2026, 1, 27, 12, 0, 0, 0, time.UTC)

// at is a monotonic reading: the test's clocks start at 0.
func at(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

func wantBounds(t *testing.T, c *serverClock, m time.Duration, lo, hi time.Time) {
	t.Helper()
	gotLo, gotHi, ok := c.bounds(m)
	if !ok {
		t.Fatal("no bounds")
	}
	// The drift widening is a thousandth of the elapsed time: within a
	// few milliseconds here.
	const eps = 5 * time.Millisecond
	if d := gotLo.Sub(lo); d > 0 || d < -eps {
		t.Fatalf("at %v: lower bound %v, want %v (within %v below)", m, gotLo, lo, eps)
	}
	if d := gotHi.Sub(hi); d < 0 || d > eps {
		t.Fatalf("at %v: upper bound %v, want %v (within %v above)", m, gotHi, hi, eps)
	}
}

// One answer bounds the server's clock within a second and a round trip;
// the bounds then move with the monotonic clock.
func TestServerClockOneAnswer(t *testing.T) {
	var c serverClock
	if _, _, ok := c.bounds(0); ok || c.ready() {
		t.Fatal("bounds before any answer")
	}
	// Sent at 1.000 s, received at 1.010 s, dated t0: the server's clock
	// read t0..t0+1s at some instant in between.
	c.observe(t0, at(1000), at(1010))
	wantBounds(t, &c, at(1010), t0, t0.Add(time.Second+10*time.Millisecond))
	wantBounds(t, &c, at(3010), t0.Add(2*time.Second), t0.Add(3*time.Second+10*time.Millisecond))
}

// Answers across a second's turn narrow the bounds to about a round trip.
func TestServerClockNarrows(t *testing.T) {
	var c serverClock
	// The server's clock is t0 + 0.6 s at monotonic 0 (unknown to the
	// clock). Answers take 10 ms; each is dated at its midpoint.
	offset := 600 * time.Millisecond
	answer := func(sent time.Duration) {
		dated := t0.Add(offset + sent + 5*time.Millisecond).Truncate(time.Second)
		c.observe(dated, sent, sent+10*time.Millisecond)
	}
	for m := 0; m < 3000; m += 100 {
		answer(at(m))
	}
	// At monotonic 3 s the server reads t0 + 3.6 s.
	truth := t0.Add(3600 * time.Millisecond)
	lo, hi, _ := c.bounds(at(3000))
	if lo.After(truth) || hi.Before(truth) {
		t.Fatalf("bounds %v..%v miss the server's clock %v", lo, hi, truth)
	}
	if w := hi.Sub(lo); w > 120*time.Millisecond {
		t.Fatalf("bounds %v wide after 30 answers across three seconds, want about a round trip", w)
	}
}

// An answer that contradicts the bounds (the server's clock was stepped)
// starts them again from that answer.
func TestServerClockStepped(t *testing.T) {
	var c serverClock
	c.observe(t0, at(0), at(10))
	c.observe(t0.Add(time.Second), at(990), at(1000))
	// Stepped back an hour.
	back := t0.Add(-time.Hour)
	c.observe(back, at(2000), at(2010))
	wantBounds(t, &c, at(2010), back, back.Add(time.Second+10*time.Millisecond))
	// And forward two hours.
	fwd := t0.Add(time.Hour)
	c.observe(fwd, at(3000), at(3010))
	wantBounds(t, &c, at(3010), fwd, fwd.Add(time.Second+10*time.Millisecond))
}

// Bounds widen as they age, for the drift of the clocks' rates.
func TestServerClockDrift(t *testing.T) {
	var c serverClock
	c.observe(t0, at(0), at(0))
	lo, hi, _ := c.bounds(time.Hour)
	want := time.Duration(float64(time.Hour) * maxDrift)
	if got := t0.Add(time.Hour).Sub(lo); got != want {
		t.Fatalf("lower bound an hour on: %v below, want %v", got, want)
	}
	if got := hi.Sub(t0.Add(time.Hour + time.Second)); got != want {
		t.Fatalf("upper bound an hour on: %v above, want %v", got, want)
	}
}

func TestNotStoredValueShapes(t *testing.T) {
	// Not a stored response: empty.
	for _, v := range [][]byte{nil, []byte("plain bytes"), {2, 0, 0, 200, 0, 0}, []byte("s1\x04key1sealed")} {
		if got := notStoredValue(v); got != nil {
			t.Fatalf("notStoredValue(%q) = %q, want nil", v, got)
		}
	}
	// Status 201, one header, a body: the header stays, the body goes.
	v := []byte{1, 0, 0, 201, 0, 1, 2, 'C', 'T', 3, 'a', '/', 'b', 'b', 'o', 'd', 'y'}
	got := notStoredValue(v)
	want := []byte{1, 1, 0, 201, 0, 1, 2, 'C', 'T', 3, 'a', '/', 'b'}
	if string(got) != string(want) {
		t.Fatalf("marker %v, want %v", got, want)
	}
	// A header whose length runs past the end: not a response.
	if got := notStoredValue([]byte{1, 0, 0, 201, 0, 1, 200, 'C'}); got != nil {
		t.Fatalf("truncated header: %v, want nil", got)
	}
}
