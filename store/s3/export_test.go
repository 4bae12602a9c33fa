package s3store

import "time"

// SetWatchClock makes s's lease watch read mono instead of the monotonic
// clock, so that a test passes a lease without sleeping.
func SetWatchClock(s *Store, mono func() time.Duration) { s.watch.Mono = mono }
