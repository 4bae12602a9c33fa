package idem_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

func TestWithKeyHash(t *testing.T) {
	ctx := context.Background()
	ring, err := seal.ParseKeyring("a-secret-of-at-least-16-bytes")
	if err != nil {
		t.Fatal(err)
	}
	keyed := func(scope, key string) string { return ring.MAC([]byte(scope + "\x00" + key)) }
	st := memory.New()
	eng := idem.New(st, idem.Policy{}, idem.WithKeyHash(keyed))
	call := idem.Call{Scope: "merchant-7", Key: "charge-ORD-123"}
	runs := 0
	for range 2 {
		if _, err := eng.Do(ctx, call, func(context.Context) ([]byte, error) { runs++; return []byte("ch_1"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 1 {
		t.Fatalf("%d runs", runs)
	}
	keys := st.Keys()
	if want := keyed(call.Scope, call.Key); !slices.Contains(keys, want) {
		t.Fatalf("index %v lacks the keyed hash %s", keys, want)
	}
	if slices.Contains(keys, store.HashKey(call.Scope, call.Key)) {
		t.Fatal("the index holds the unkeyed hash")
	}
	if rec, err := eng.Lookup(ctx, call.Scope, call.Key); err != nil || string(rec.Value) != "ch_1" {
		t.Fatalf("Lookup: %+v, %v", rec, err)
	}
	// nil restores the default.
	plain := idem.New(st, idem.Policy{}, idem.WithKeyHash(nil))
	if _, err := plain.Lookup(ctx, call.Scope, call.Key); err == nil {
		t.Fatal("the default hash found a record written under the keyed one")
	}
}

// A service on a store it does not wrap with seal.Wrap keys its record
// names, so that a known key cannot be confirmed against a dump.
func ExampleWithKeyHash() {
	ring, err := seal.ParseKeyring("a-secret-of-at-least-16-bytes") // os.Getenv("IDEM_SECRET")
	if err != nil {
		panic(err)
	}
	eng := idem.New(memory.New(), idem.Policy{}, idem.WithKeyHash(func(scope, key string) string {
		return ring.MAC([]byte(scope + "\x00" + key))
	}))
	res, _ := eng.Do(context.Background(), idem.Call{Scope: "merchant-7", Key: "charge-ORD-123"},
		func(context.Context) ([]byte, error) { return []byte("ch_1"), nil })
	fmt.Println(string(res.Value))
	// Output: ch_1
}
