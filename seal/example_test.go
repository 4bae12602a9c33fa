package seal_test

import (
	"context"
	"fmt"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/seal"
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
