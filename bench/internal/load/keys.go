// Package load drives the contenders with vegeta: the load scenarios
// (first calls, replays, a mix) and the race scenario.
package load

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/idem-dev/idem/bench/internal/app"
)

// Keys makes idempotency keys shaped as UUIDs: 36 characters, the only
// length gofiber's middleware accepts by default. A random prefix per
// Keys keeps keys of different runs apart in stores that outlive a run.
type Keys struct {
	prefix uint32
	next   atomic.Uint64
}

// NewKeys returns a key space with a random prefix.
func NewKeys() *Keys { return &Keys{prefix: rand.Uint32()} }

// Key returns key number i.
func (k *Keys) Key(i uint64) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", k.prefix, i&0xffffffffffff)
}

// Next returns a key never returned before.
func (k *Keys) Next() (string, uint64) {
	i := k.next.Add(1) - 1
	return k.Key(i), i
}

// Body is the request body of key number i: the same bytes every time,
// so that a retry is a replay and not a payload mismatch.
func Body(i uint64) []byte {
	return fmt.Appendf(nil, `{"amount":1000,"currency":"usd","customer":"cus_%d"}`, i)
}

// Request describes the requests of a contender.
type Request struct {
	URL       string // base URL, without a path
	KeyHeader string // the header the contender reads its key from
	Extra     http.Header
}

func (r Request) target(t *vegeta.Target, key string, i uint64) {
	t.Method = http.MethodPost
	t.URL = r.URL + app.PathOperation
	t.Body = Body(i)
	// A caller's credentials, as an API's clients send them: idem refuses
	// a keyed request that carries none (401), and hashes them into the
	// caller's scope.
	h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk_bench"}}
	h.Set(r.KeyHeader, key)
	for k, vs := range r.Extra {
		h[k] = vs
	}
	t.Header = h
}
