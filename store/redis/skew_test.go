package redisstore_test

import (
	"testing"

	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

// TestEngineClockSkew runs storetest.EngineClockSkew on two replicas
// with store clients of their own (the holder on rueidis, the retrier on go-redis), whose clocks disagree
// by up to 10 leases: no live holder's key runs twice, and a dead
// holder's key is taken over a lease after the taker first looked.
func TestEngineClockSkew(t *testing.T) {
	// Not parallel: it runs before the package's parallel tests, so that
	// the holders' renewals are not starved by them.
	gc := newClient(t, nil)
	rc := newRueidis(t, testAddr(t))
	prefix := uniquePrefix()
	t.Cleanup(func() { dropPrefix(t, gc, prefix) })
	holder, err := redisstore.NewRueidis(rc, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	retrier, err := redisstore.New(newClient(t, nil), redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close(); _ = retrier.Close() })
	storetest.EngineClockSkew(t, holder, retrier, func(t *testing.T) (store.Store, func()) {
		c := newClient(t, nil)
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		// Closed, the store refuses every call with store.ErrClosed, which
		// the engine does not retry: the holder is gone at once.
		return s, func() { _ = s.Close(); _ = c.Close() }
	})
}
