package pebblestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/pebble"
)

func Example() {
	dir, err := os.MkdirTemp("", "idem-data")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		log.Fatal(err) // errors.Is(err, pebblestore.ErrLocked): another process has dir open
	}
	defer s.Close()

	ctx := context.Background()
	rec := store.Record{
		KeyHash: store.HashKey("tenant-1", "charge-ORD-123"), Scope: "tenant-1", Key: "charge-ORD-123",
		Fingerprint: "sha256:...", Binding: "POST /charges", State: store.InProgress, Token: 1,
	}
	// The first call reserves the key for a minute; it is on disk when
	// Reserve returns. The store sets the record's times from its own clock.
	res, err := s.Reserve(ctx, store.ReserveRequest{Record: rec, Lease: time.Minute, TTL: 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired:", res.Acquired)

	// It runs the operation, then stores the outcome.
	err = s.Complete(ctx, store.Completion{
		Fence: store.Fence{KeyHash: rec.KeyHash, Scope: rec.Scope, Token: rec.Token},
		State: store.Succeeded, Value: []byte(`{"id":"ch_1"}`), TTL: 24 * time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}

	// A retry finds the outcome instead of running again.
	rec.Token = 2
	res, err = s.Reserve(ctx, store.ReserveRequest{Record: rec, Lease: time.Minute, TTL: 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired:", res.Acquired, res.Existing.State, string(res.Existing.Value))
	// Output:
	// acquired: true
	// acquired: false succeeded {"id":"ch_1"}
}
