package pgtx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testdb"
	"github.com/idem-dev/idem/store/postgres"
	"github.com/idem-dev/idem/store/postgres/pgtx"
)

// Example makes a payment once per key: the payment row and the record of
// the outcome commit together. A retry replays the first payment.
func Example() {
	ctx := context.Background()
	pool, ps := openStore(ctx)
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS idem_pgtx_example.payments (id uuid PRIMARY KEY, cents bigint)`); err != nil {
		log.Fatal(err)
	}
	s := pgtx.New(ps)
	eng := idem.New(s, idem.Policy{})
	defer eng.Close()

	pay := func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		h, _ := idem.HoldFrom(ctx) // the payment is named by its record
		if _, err := tx.Exec(ctx, `INSERT INTO idem_pgtx_example.payments VALUES ($1, 4200)`, h.ID); err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"payment": h.ID})
	}
	call := idem.Call{Scope: "payments", Key: "pay-ORD-123"}
	for range 2 {
		res, err := s.Do(ctx, eng, call, pay)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("replayed:", res.Replayed)
	}
	var n int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM idem_pgtx_example.payments`).Scan(&n)
	fmt.Println("payments:", n)

	// It prints (TestExamples checks; an Output comment would make go test
	// run it even where no server is reachable):
	//
	// replayed: false
	// replayed: true
	// payments: 1
}

// ExampleStore_DoSteps charges a card (another service) between two database
// steps. If the process dies after the order step, the next call resumes
// at the charge; the card API gets a key of its own, so that a charge
// repeated after a crash inside its step is charged once.
func ExampleStore_DoSteps() {
	ctx := context.Background()
	pool, ps := openStore(ctx)
	defer pool.Close()
	if err := pgtx.Migrate(ctx, pool, ps.Options()); err != nil {
		log.Fatal(err)
	}
	s := pgtx.New(ps)
	eng := idem.New(s, idem.Policy{})
	defer eng.Close()

	chargeCard := func(idempotencyKey string) (string, error) { return "ch_1", nil } // a payments API
	res, err := s.DoSteps(ctx, eng, idem.Call{Scope: "orders", Key: "order-42"},
		pgtx.Step{Name: "order", Run: func(ctx context.Context, tx pgx.Tx, _ []byte) ([]byte, error) {
			// INSERT the order in tx ...
			return []byte("order-42"), nil
		}},
		pgtx.Step{Name: "charge", Run: func(ctx context.Context, tx pgx.Tx, order []byte) ([]byte, error) {
			h, _ := idem.HoldFrom(ctx)
			charge, err := chargeCard(h.ID + ":charge")
			if err != nil {
				return nil, err
			}
			// INSERT the charge in tx ...
			return []byte(string(order) + " paid by " + charge), nil
		}},
		pgtx.Step{Name: "receipt", Run: func(ctx context.Context, tx pgx.Tx, paid []byte) ([]byte, error) {
			// INSERT the receipt in tx; it commits with the record.
			return paid, nil
		}},
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(res.Value))

	// It prints:
	//
	// order-42 paid by ch_1
}

// openStore connects to the database (DATABASE_URL) and returns its pool
// and idem's store in the schema idem_pgtx_example, migrated.
func openStore(ctx context.Context) (*pgxpool.Pool, *postgres.Store) {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	opts := postgres.Options{Schema: "idem_pgtx_example"}
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		log.Fatal(err)
	}
	ps, err := postgres.New(pool, opts)
	if err != nil {
		log.Fatal(err)
	}
	return pool, ps
}

// TestExamples runs the examples against the test server and checks what
// they print. The examples' schema is dropped before and after.
func TestExamples(t *testing.T) {
	testdb.PostgresExample(t, "idem_pgtx_example")
	for _, ex := range []struct {
		run  func()
		want string
	}{
		{Example, "replayed: false\nreplayed: true\npayments: 1\n"},
		{ExampleStore_DoSteps, "order-42 paid by ch_1\n"},
	} {
		if got := testkit.Stdout(t, ex.run); got != ex.want {
			t.Errorf("printed:\n%s\nwant:\n%s", got, ex.want)
		}
	}
}
