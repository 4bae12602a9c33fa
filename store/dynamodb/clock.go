package dynamodbstore

import (
	"errors"
	"net/http"
	"sync"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// DynamoDB has no clock a condition can read, and clients' clocks
// disagree, so the store never compares its own wall clock with anyone's.
// It judges
//
//   - expiry on the server's clock as its answers carry it: every answer
//     has a Date header, the server's clock to the second. serverClock
//     turns the Dates into bounds on the server's clock at any instant of
//     this process's monotonic clock; a write stores an upper bound of
//     when it was applied plus the TTL, a reader counts the record expired
//     once a lower bound of its own reading passes that
//     (docs/stores/DYNAMODB.md);
//   - leases by observe and wait (store/internal/leasewatch): a version of
//     an in_progress record is stale once this client has itself watched
//     it unchanged for the lease the record stores.

// datePrecision is the resolution of an HTTP Date: a server that answers
// at 12:00:00.9 says 12:00:00.
const datePrecision = time.Second

// maxDrift bounds how far the server's clock and this process's monotonic
// clock may run apart, per unit of time: crystals drift by tens of parts
// per million, and NTP slews CLOCK_MONOTONIC by at most 500 ppm. The
// bounds of serverClock widen by this much as they age.
const maxDrift = 1e-3

// serverClock bounds the server's clock from the Dates of its answers, on
// this process's monotonic clock.
//
// An answer sent at monotonic instant sent and received at recv, dated D,
// was dated at some instant t between the two, when the server's clock
// read between D and D + 1 s. So the offset of the server's clock from the
// monotonic clock (server time minus monotonic time) lies in
// [D - recv, D + 1 s - sent]. Each answer narrows the interval kept so
// far, which after a few answers across a second's turn is about a round
// trip wide. If an answer contradicts it (the server's clock was stepped,
// or another of its hosts answered with a clock of its own), the interval
// starts again from that answer alone.
type serverClock struct {
	// mono returns a monotonic reading; nil means the time elapsed since
	// the first use, on time.Now's monotonic clock.
	mono func() time.Duration

	mu    sync.Mutex
	start time.Time     // guarded by mu; set on first use
	ok    bool          // guarded by mu; an answer was seen
	lo    time.Duration // guarded by mu; lower bound of the offset (Unix ns - mono)
	loAt  time.Duration // guarded by mu; when lo was set (monotonic)
	hi    time.Duration // guarded by mu; upper bound of the offset
	hiAt  time.Duration // guarded by mu; when hi was set (monotonic)
}

// now returns the monotonic reading.
func (c *serverClock) now() time.Duration {
	if c.mono != nil {
		return c.mono()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() {
		c.start = time.Now()
	}
	return time.Since(c.start)
}

// drift is how far a bound set at since has widened by at.
func drift(since, at time.Duration) time.Duration {
	if at <= since {
		return 0
	}
	return time.Duration(float64(at-since) * maxDrift)
}

// observe narrows the bounds with an answer dated date, sent and received
// at those monotonic readings.
func (c *serverClock) observe(date time.Time, sent, recv time.Duration) {
	d := time.Duration(date.UnixNano())
	lo, hi := d-recv, d+datePrecision-sent
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok {
		c.ok, c.lo, c.loAt, c.hi, c.hiAt = true, lo, recv, hi, sent
		return
	}
	curLo, curHi := c.lo-drift(c.loAt, recv), c.hi+drift(c.hiAt, sent)
	if lo > curHi || hi < curLo {
		// A contradiction: start again from this answer.
		c.lo, c.loAt, c.hi, c.hiAt = lo, recv, hi, sent
		return
	}
	if lo > curLo {
		c.lo, c.loAt = lo, recv
	}
	if hi < curHi {
		c.hi, c.hiAt = hi, sent
	}
}

// bounds returns a lower and an upper bound of the server's clock at the
// monotonic reading at; ok is false before the first answer.
func (c *serverClock) bounds(at time.Duration) (lo, hi time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok {
		return time.Time{}, time.Time{}, false
	}
	l := at + c.lo - drift(c.loAt, at)
	h := at + c.hi + drift(c.hiAt, at)
	return time.Unix(0, int64(l)).UTC(), time.Unix(0, int64(h)).UTC(), true
}

// ready reports whether an answer was seen.
func (c *serverClock) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok
}

// answerDate returns the Date of an answer: from the result metadata of a
// successful call (the SDK's RecordResponseTiming middleware parses it),
// or from the HTTP response of a failed one.
func answerDate(md *middleware.Metadata, err error) (time.Time, bool) {
	if md != nil {
		if t, ok := awsmiddleware.GetServerTime(*md); ok && !t.IsZero() {
			return t, true
		}
	}
	var re *smithyhttp.ResponseError
	if err != nil && errors.As(err, &re) && re.Response != nil {
		if t, perr := http.ParseTime(re.Response.Header.Get("Date")); perr == nil {
			return t, true
		}
	}
	return time.Time{}, false
}
