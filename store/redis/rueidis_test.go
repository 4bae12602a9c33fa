package redisstore_test

import (
	"net/url"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idem-dev/idem/internal/testkit/testenv"
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
	storetest.Run(t, harnessOn(func(prefix string) (*redisstore.Store, error) {
		return redisstore.NewRueidis(rc, redisstore.Options{Prefix: prefix})
	}, gc, func(*testing.T) redis.UniversalClient { return gc }))
}
