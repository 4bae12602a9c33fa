package storetest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

var freshSeq atomic.Int64

// FreshRequest is a reservation of a fresh key in scope "test": lease one
// minute, TTL one hour, taking a stale holder over.
func FreshRequest() store.ReserveRequest {
	key := fmt.Sprintf("key-%d", freshSeq.Add(1))
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("test", key), Scope: "test", Key: key,
			Fingerprint: "sha256:fp", Binding: "POST /charges", State: store.InProgress,
			Token: uint64(freshSeq.Add(1)) << 8, RequestID: "req-" + key,
		},
		Lease:         time.Minute,
		TTL:           time.Hour,
		TakeOverStale: true,
	}
}

// Taker is another caller's reservation of req's key, with the same
// fingerprint and binding: it may take a stale req over.
func Taker(req store.ReserveRequest) store.ReserveRequest {
	tk := req
	tk.Record.Token++
	tk.Record.RequestID += "-taker"
	return tk
}

// FenceOf is the fence of the reservation req makes.
func FenceOf(req store.ReserveRequest) store.Fence {
	return store.Fence{KeyHash: req.Record.KeyHash, Scope: req.Record.Scope, Token: req.Record.Token}
}

// Counter returns a check that a call makes want round trips to the
// backend, as n counts them; unit names them in failures ("statements",
// "commands").
func Counter(t *testing.T, unit string, n func() int64) func(what string, want int64, call func() error) {
	return func(what string, want int64, call func() error) {
		t.Helper()
		before := n()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := n() - before; got != want {
			t.Errorf("%s: %d %s, want %d", what, got, unit, want)
		}
	}
}
