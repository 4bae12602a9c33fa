package redisstore_test

import (
	"net/url"
	"sync"
	"testing"

	"github.com/redis/rueidis"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

func newRueidis(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testAddr(t testing.TB) string {
	u, err := url.Parse(testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestConformanceRueidis runs the suite on the rueidis client, with peers
// on go-redis: the racers of one key use both clients at once.
func TestConformanceRueidis(t *testing.T) {
	t.Parallel()
	rc := newRueidis(t, testAddr(t))
	gc := newClient(t, nil)
	var mu sync.Mutex
	prefixes := map[store.Store]string{}
	prefixOf := func(t *testing.T, s store.Store) string {
		mu.Lock()
		defer mu.Unlock()
		p, ok := prefixes[s]
		if !ok {
			t.Fatalf("store %p was not made by the harness", s)
		}
		return p
	}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			prefix := uniquePrefix()
			s, err := redisstore.NewRueidis(rc, redisstore.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			prefixes[s] = prefix
			mu.Unlock()
			t.Cleanup(func() { dropPrefix(t, gc, prefix) })
			return s
		},
		Peer: func(t *testing.T, s store.Store) store.Store {
			p, err := redisstore.New(gc, redisstore.Options{Prefix: prefixOf(t, s)})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		IndexKeys:    func(t *testing.T, s store.Store) []string { return keysUnder(t, gc, prefixOf(t, s)) },
		NativeExpiry: true,
	})
}
