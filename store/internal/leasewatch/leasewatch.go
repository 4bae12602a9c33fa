// Package leasewatch judges leases for stores that have no clock of their
// own (S3, DynamoDB), by the observe-and-wait rule: a client notes the
// version of an in_progress record (its ETag, its renewal counter) the first
// time it sees it, on its own monotonic clock, and counts the holder's lease
// as over only after it has itself watched that same version, unchanged, for
// a whole lease. A renewal changes the version and starts the count again.
// The takeover that follows must be a write conditional on the version
// watched, so that a renewal landing in between wins.
//
// No two machines' clocks are ever compared: a holder whose clock is hours
// off is taken over no sooner than a lease after the taker first saw its
// last renewal, and a dead holder no later than a lease after the taker
// first looked (two, counting the look that starts the watch).
//
// Versions must never come back: a record written anew must get a version
// it never had (a renewal count that only grows, an ETag of bytes never
// written before). Then a version seen at two moments was the record's
// version all along between them, and the watch of one version may go on
// while others are seen: a client whose calls are in flight together may
// read an older version after a newer one, and that late read continues
// the older version's count instead of starting it again.
package leasewatch

import (
	"sync"
	"time"
)

// Watcher remembers, per key, the versions of the in_progress record seen
// last and since when. Its zero value is ready to use and reads time.Now's
// monotonic clock.
type Watcher struct {
	// Mono returns a monotonic reading; nil means the time elapsed since the
	// Watcher's first use, on the monotonic clock. Tests set it to step
	// time without sleeping.
	Mono func() time.Duration

	mu    sync.Mutex
	seen  map[string][]sighting // guarded by mu; per key, oldest first, at most keepVersions
	start time.Time             // guarded by mu; set on first use
	adds  int                   // guarded by mu; sightings added since the last prune
}

type sighting struct {
	version string
	since   time.Duration // monotonic reading when version was first seen
	lease   time.Duration
	at      time.Time // the caller's reading of its store's clock then (Watch)
}

// keepVersions is how many versions of one key are remembered: enough for
// the reads of one client's concurrent calls to arrive out of order around
// a write or two.
const keepVersions = 4

// pruneEvery is how many new sightings pass between two sweeps of those no
// longer needed, so that keys never looked at again do not stay forever.
const pruneEvery = 4096

func (w *Watcher) mono() time.Duration {
	if w.Mono != nil {
		return w.Mono()
	}
	if w.start.IsZero() {
		w.start = time.Now()
	}
	return time.Since(w.start)
}

// Left returns how long the lease of the in_progress record of key, at
// version, still runs as this client judges: lease minus how long it has
// watched that version unchanged. A version not seen before starts a new
// watch and gets the whole lease. Zero or less means the lease is over and
// a takeover conditional on version may be tried.
func (w *Watcher) Left(key, version string, lease time.Duration) time.Duration {
	left, _ := w.Watch(key, version, lease, time.Time{})
	return left
}

// Watch is Left that also returns when the watch of version began, as
// at said on the first sighting: the caller's reading of its store's
// clock (an S3 server's Date), so that the end of the lease it reports
// for display, since + lease, stays the same from one read to the next
// while the version does. Later calls' at are ignored.
func (w *Watcher) Watch(key, version string, lease time.Duration, at time.Time) (left time.Duration, since time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.mono()
	vs := w.seen[key]
	for _, s := range vs {
		if s.version == version {
			return s.since + s.lease - now, s.at
		}
	}
	if w.seen == nil {
		w.seen = make(map[string][]sighting)
	}
	if len(vs) >= keepVersions {
		vs = append(vs[:0:0], vs[len(vs)-keepVersions+1:]...)
	}
	w.seen[key] = append(vs, sighting{version: version, since: now, lease: lease, at: at})
	if w.adds++; w.adds >= pruneEvery {
		w.prune(now)
	}
	return lease, at
}

// Forget drops what was seen of key: the record is gone for good. A call
// still judging a version it read before should not run concurrently, or
// its late read starts that version's watch again (a delay, never an early
// takeover).
func (w *Watcher) Forget(key string) {
	w.mu.Lock()
	delete(w.seen, key)
	w.mu.Unlock()
}

// Len reports how many keys are being watched.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

// prune drops the sightings watched for more than twice their lease: a
// client that looks again after that starts a new watch, which only
// delays a takeover by one lease. w.mu is held.
func (w *Watcher) prune(now time.Duration) {
	w.adds = 0
	for k, vs := range w.seen {
		kept := vs[:0]
		for _, s := range vs {
			if now-s.since <= 2*s.lease {
				kept = append(kept, s)
			}
		}
		if len(kept) == 0 {
			delete(w.seen, k)
		} else {
			w.seen[k] = kept
		}
	}
}
