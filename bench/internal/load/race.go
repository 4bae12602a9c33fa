package load

import (
	"net/http"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/idem-dev/idem/bench/internal/app"
)

// RaceTargeter returns keys*perKey requests, the keys interleaved (request
// n uses key n mod keys) so that each key's requests are spread over the
// whole burst, each asking the operation to take delay so that they
// overlap.
func RaceTargeter(req Request, ks *Keys, keys, perKey int, delay time.Duration) vegeta.Targeter {
	var seq atomic.Uint64
	total := uint64(keys * perKey)
	req.Extra = http.Header{app.HeaderDelay: {delay.String()}}
	return func(t *vegeta.Target) error {
		n := seq.Add(1) - 1
		if n >= total {
			return vegeta.ErrNoTargets
		}
		i := n % uint64(keys)
		req.target(t, ks.Key(i), i)
		return nil
	}
}

// Warm opens n connections to baseURL (n concurrent GETs of the health
// path), so that a burst that follows does not wait for connects.
func Warm(client *http.Client, baseURL string, n int) {
	var seq atomic.Int64
	tr := func(t *vegeta.Target) error {
		if seq.Add(1) > int64(n) {
			return vegeta.ErrNoTargets
		}
		t.Method, t.URL = http.MethodGet, baseURL+app.PathHealth
		return nil
	}
	Attack(client, tr, n, 0)
}
