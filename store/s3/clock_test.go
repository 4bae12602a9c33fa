package s3store_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	s3store "github.com/idem-dev/idem/store/s3"
)

// frozenClock is an http.RoundTripper that shows the store a server whose
// clock stands still at a time the test sets: every answer's Date is that
// time, and a version's Last-Modified is the time that was set when the
// version was written (through this clock). The server does everything
// else for real. Tests use it to pass a TTL of days, and to pin the
// boundaries of expiry to the second.
type frozenClock struct {
	next http.RoundTripper

	mu      sync.Mutex
	now     time.Time            // guarded by mu
	written map[string]time.Time // guarded by mu; path + " " + ETag -> now when written
}

func newFrozenClock(at time.Time) *frozenClock {
	return &frozenClock{next: transport, now: at, written: map[string]time.Time{}}
}

func (c *frozenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *frozenClock) set(at time.Time) {
	c.mu.Lock()
	c.now = at
	c.mu.Unlock()
}

func (c *frozenClock) add(d time.Duration) { c.set(c.Now().Add(d)) }

func (c *frozenClock) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if resp.Header.Get("Date") != "" {
		resp.Header.Set("Date", c.now.UTC().Format(http.TimeFormat))
	}
	version := req.URL.Path + " " + resp.Header.Get("ETag")
	switch {
	case req.Method == http.MethodPut && resp.StatusCode/100 == 2:
		c.written[version] = c.now
	case resp.Header.Get("Last-Modified") != "":
		if at, ok := c.written[version]; ok {
			resp.Header.Set("Last-Modified", at.UTC().Format(http.TimeFormat))
		}
	}
	return resp, nil
}

// clockClient returns a client of srv whose answers pass through c, and
// then through f when f is not nil (see faultClient). The SDK's
// correction of its signing time by the server's Date is off: the Date
// is made up.
func (srv *server) clockClient(c *frozenClock, f *faults) *s3.Client {
	if f == nil {
		f = &faults{}
	}
	f.next = c
	return srv.faultClient(f, func(o *s3.Options) { o.DisableClockSkewCorrection = true })
}

// clockStore is a store of its own on srv, on a frozen server clock.
func clockStore(t *testing.T, srv *server, c *frozenClock) *s3store.Store {
	t.Helper()
	return newStore(t, srv, srv.clockClient(c, nil))
}

// watchClock is a monotonic clock for a store's lease watch that moves
// only when stepped (s3store.SetWatchClock).
type watchClock struct{ now atomic.Int64 }

func (c *watchClock) read() time.Duration  { return time.Duration(c.now.Load()) }
func (c *watchClock) step(d time.Duration) { c.now.Add(int64(d)) }

// watched sets a stepped clock on s's lease watch and returns it.
func watched(s *s3store.Store) *watchClock {
	c := &watchClock{}
	s3store.SetWatchClock(s, c.read)
	return c
}
