package dynamodbstore

import "time"

// SetWatchClock makes s's lease watch read mono instead of the monotonic
// clock, so that a test passes a lease without sleeping.
func SetWatchClock(s *Store, mono func() time.Duration) { s.watch.Mono = mono }

// ServerClockBounds returns the bounds s holds of the server's clock now.
func ServerClockBounds(s *Store) (lo, hi time.Time, ok bool) {
	return s.clock.bounds(s.clock.now())
}

// NotStoredValue is notStoredValue, for the test through idemhttp.
func NotStoredValue(v []byte) []byte { return notStoredValue(v) }

// WriteSlack is writeSlack.
const WriteSlack = writeSlack

// Redated reports how many writes s re-dated because their answer came
// late.
func Redated(s *Store) int64 { return s.redated.Load() }
