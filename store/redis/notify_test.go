package redisstore_test

import (
	"testing"

	redisstore "github.com/idem-dev/idem/store/redis"
	"github.com/idem-dev/idem/store/storetest"
)

// TestWake: two stores under one prefix through two clients, as two
// gateways would be: a waiter on one is woken by pub/sub when the holder on
// the other ends, and the figure of that wake-up is logged (go test -v).
func TestWake(t *testing.T) {
	prefix := uniquePrefix()
	ca, cb := newClient(t, nil), newClient(t, nil)
	a, err := redisstore.New(ca, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	b, err := redisstore.New(cb, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close(); dropPrefix(t, ca, prefix) })
	storetest.RunWake(t, a, b)
}
