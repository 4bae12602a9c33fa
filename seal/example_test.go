package seal_test

import (
	"context"
	"fmt"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// The payments API seals its records with IDEM_SECRET: first the secret that
// protects new records, then the one it is rotating away from. Records
// sealed before the rotation still replay.
func Example() {
	ctx := context.Background()
	backend := memory.New() // postgres.New(pool, opts) in production

	// Before the rotation: one secret (IDEM_SECRET=2026-10:...).
	before, err := seal.ParseKeyring("2026-10:c2VjcmV0LW9mLW9jdG9iZXItMjAyNi0zMi1ieXRlcw==")
	if err != nil {
		panic(err)
	}
	eng := idem.New(seal.Wrap(backend, before), idem.Policy{})
	call := idem.Call{Scope: "merchant-7", Key: "charge-ORD-123"}
	res, _ := eng.Do(ctx, call, func(context.Context) ([]byte, error) {
		return []byte(`{"charge":"ch_1"}`), nil
	})
	fmt.Printf("first call: %s, replayed %v\n", res.Value, res.Replayed)

	// After: the new secret first, the old one second.
	after, err := seal.ParseKeyring("2026-11:bm92ZW1iZXItMjAyNi1zZWNyZXQtb2YtMzItYnl0ZXM=,2026-10:c2VjcmV0LW9mLW9jdG9iZXItMjAyNi0zMi1ieXRlcw==")
	if err != nil {
		panic(err)
	}
	eng = idem.New(seal.Wrap(backend, after), idem.Policy{})
	res, _ = eng.Do(ctx, call, func(context.Context) ([]byte, error) {
		return []byte(`{"charge":"ch_2"}`), nil // never runs
	})
	fmt.Printf("retry after rotation: %s, replayed %v\n", res.Value, res.Replayed)
	fmt.Println("new records sealed with", after.IDs()[0])
	// Output:
	// first call: {"charge":"ch_1"}, replayed false
	// retry after rotation: {"charge":"ch_1"}, replayed true
	// new records sealed with 2026-11
}

// A store that seal.Wrap does not wrap names its records by a keyed hash
// of scope and key, so that a dump of it cannot confirm a key someone
// knows: Keyring.MAC, given to the engine with idem.WithKeyHash. The hash
// frames the scope by its length, so that no two pairs hash alike.
func ExampleKeyring_MAC() {
	ring, err := seal.ParseKeyring("2026-10:c2VjcmV0LW9mLW9jdG9iZXItMjAyNi0zMi1ieXRlcw==")
	if err != nil {
		panic(err)
	}
	keyed := func(scope, key string) string {
		return ring.MAC(fmt.Appendf(nil, "%d:%s%s", len(scope), scope, key))
	}
	backend := memory.New()
	eng := idem.New(backend, idem.Policy{}, idem.WithKeyHash(keyed))
	defer eng.Close()

	call := idem.Call{Scope: "merchant-7", Key: "charge-ORD-123"}
	for range 2 {
		res, _ := eng.Do(context.Background(), call, func(context.Context) ([]byte, error) {
			return []byte(`{"charge":"ch_1"}`), nil
		})
		fmt.Printf("%s, replayed %v\n", res.Value, res.Replayed)
	}
	for _, name := range backend.Keys() {
		fmt.Println("record named by the keyed hash:", name == keyed(call.Scope, call.Key),
			"by the plain one:", name == store.HashKey(call.Scope, call.Key))
	}
	// Output:
	// {"charge":"ch_1"}, replayed false
	// {"charge":"ch_1"}, replayed true
	// record named by the keyed hash: true by the plain one: false
}
