package postgres_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testdb"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/postgres"
)

// Example migrates a schema, reserves a key, completes it and reads the
// record back, as the engine does for a first call. A second caller with
// the same key finds the stored outcome instead of acquiring the key.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	opts := postgres.Options{Schema: "idem_example"}
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		log.Fatal(err)
	}
	s, err := postgres.New(pool, opts)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	rec := store.Record{
		KeyHash: store.HashKey("charge_customer", "charge-ORD-123"),
		Scope:   "charge_customer", Key: "charge-ORD-123",
		Fingerprint: "sha256:9f86d081", Binding: "POST /charges",
		State: store.InProgress, Token: 42, RequestID: "req_1",
	}
	// Durations, not instants: the server's clock judges the lease and the
	// record's lifetime.
	res, err := s.Reserve(ctx, store.ReserveRequest{Record: rec, Lease: time.Minute, TTL: 24 * time.Hour, TakeOverStale: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first call acquired:", res.Acquired)

	// ... run the operation, then store its outcome, fenced by the token.
	err = s.Complete(ctx, store.Completion{
		Fence: store.Fence{KeyHash: rec.KeyHash, Scope: rec.Scope, Token: rec.Token},
		State: store.Succeeded, Value: []byte(`{"id":"ch_1"}`), TTL: 24 * time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}

	retry := rec
	retry.Token, retry.RequestID = 43, "req_2"
	res, err = s.Reserve(ctx, store.ReserveRequest{Record: retry, Lease: time.Minute, TTL: 24 * time.Hour, TakeOverStale: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("retry acquired: %v, replays %s %s\n", res.Acquired, res.Existing.State, res.Existing.Value)

	// It prints (TestExample checks; an Output comment would make go test
	// run it even where no server is reachable):
	//
	// first call acquired: true
	// retry acquired: false, replays succeeded {"id":"ch_1"}
}

// TestExample runs Example against the test server and checks what it
// prints. The example's schema is dropped before and after.
func TestExample(t *testing.T) {
	testdb.PostgresExample(t, "idem_example")

	got := testkit.Stdout(t, Example)
	want := "first call acquired: true\nretry acquired: false, replays succeeded {\"id\":\"ch_1\"}\n"
	if got != want {
		t.Fatalf("Example printed:\n%s\nwant:\n%s", got, want)
	}
}
