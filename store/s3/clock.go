package s3store

import (
	"fmt"
	"sync"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// S3 has no clock a client can ask for, and clients' clocks disagree, so
// the store never compares its own clock with anyone's. It judges
//
//   - expiry on the server's clock as its answers carry it: the Date of
//     the response that read a version, against that version's
//     Last-Modified plus the TTL the object stores as a duration (see
//     stored.expired);
//   - leases by observe and wait (store/internal/leasewatch): a version
//     of an in_progress object is stale once this client has itself
//     watched it unchanged for the lease the object stores.

// serverTime returns the Date of the response whose result metadata md
// is, as the SDK parsed it (the clock-skew middleware every operation
// runs).
func serverTime(md middleware.Metadata, op, key string) (time.Time, error) {
	t, ok := awsmiddleware.GetServerTime(md)
	if !ok || t.IsZero() {
		return time.Time{}, fmt.Errorf("s3store: %s %s: the server sent no Date header; the store judges expiry on the server's clock and cannot without it", op, printedKey(key))
	}
	return t, nil
}

// serverClock estimates the server's clock for the times an object
// carries for display (created_at, updated_at, expires_at, lease_until),
// which a writer must put in the body before the server has dated the
// write: the Date of the latest answer plus the time elapsed since it
// arrived, on the monotonic clock, in whole seconds like the Date itself.
// Before the first answer it is the local clock. Nothing is judged by
// these times; records read back carry the server's own (Last-Modified,
// Date).
type serverClock struct {
	mu   sync.Mutex
	date time.Time // guarded by mu; the latest Date seen
	at   time.Time // guarded by mu; when it arrived (monotonic)
}

// saw notes a Date the server sent.
func (c *serverClock) saw(date time.Time) {
	c.mu.Lock()
	c.date, c.at = date, time.Now()
	c.mu.Unlock()
}

// now returns the estimate.
func (c *serverClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.date.IsZero() {
		return time.Now().UTC().Truncate(time.Second)
	}
	return c.date.Add(time.Since(c.at)).UTC().Truncate(time.Second)
}
