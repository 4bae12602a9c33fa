package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/store"
	redisstore "github.com/idem-dev/idem/store/redis"
)

// Example opens a store on a Redis server and takes a key through the
// transitions the engine makes: reserve, complete, and the retry that finds
// the stored outcome. Usually the engine (idem.New) drives the store.
//
// It has no Output section because it needs a running Redis; the tests cover
// the same steps.
func Example() {
	// ContextTimeoutEnabled lets go-redis stop at a context's deadline.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close() // the store never closes a client it was given

	st, err := redisstore.New(client, redisstore.Options{Prefix: "billing:idem:"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	ctx := context.Background()
	rec := store.Record{
		KeyHash:     store.HashKey("tenant-7", "charge-ORD-123"),
		Scope:       "tenant-7",
		Key:         "charge-ORD-123",
		Fingerprint: "sha256:...",
		State:       store.InProgress,
		Token:       1,
	}
	// Durations, not instants: Redis's clock runs the lease, and Redis
	// drops the key when its lifetime is over.
	res, err := st.Reserve(ctx, store.ReserveRequest{Record: rec, Lease: time.Minute, TTL: 24 * time.Hour, TakeOverStale: true})
	if err != nil {
		log.Fatal(err)
	}
	if !res.Acquired {
		fmt.Println("already seen:", res.Existing.State)
		return
	}
	// ... run the operation, then store its outcome under the same token.
	err = st.Complete(ctx, store.Completion{
		Fence: store.Fence{KeyHash: rec.KeyHash, Scope: rec.Scope, Token: rec.Token},
		State: store.Succeeded, Value: []byte(`{"id":"ch_1"}`), TTL: 24 * time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}
	// A retry finds the outcome instead of running the operation again.
	got, err := st.Get(ctx, rec.Scope, rec.KeyHash)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %s\n", got.State, got.Value)
}
