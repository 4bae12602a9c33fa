// Command ledger is an example service: money transfers over HTTP, each
// made exactly once per Idempotency-Key, even when the process is killed
// in the middle of one. The idempotency records live in the ledger's own
// PostgreSQL database, and each transfer commits in the same transaction
// as the record of its outcome (package store/postgres/pgtx).
//
//	go run ./examples/ledger -db postgres://postgres@127.0.0.1:5432/test
//	curl -s -XPOST localhost:8081/transfers -H 'Idempotency-Key: t-1' \
//	     -d '{"from":"alice","to":"bob","amount_cents":500}'
//	curl -s localhost:8081/accounts/alice
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	dsn := fs.String("db", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN")
	schema := fs.String("schema", "ledger_example", "schema for the ledger and its idempotency records")
	listen := fs.String("listen", "127.0.0.1:8081", "address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc, err := NewService(ctx, pool, *schema, idem.Policy{TTL: 24 * time.Hour})
	if err != nil {
		return err
	}
	defer svc.Close()
	for _, acct := range []string{"alice", "bob"} {
		if _, err := svc.Ledger.Balance(ctx, pool, acct); errors.Is(err, ErrNoAccount) {
			if err := svc.Ledger.Open(ctx, pool, acct, 10_000); err != nil {
				return err
			}
		}
	}

	srv := &http.Server{Addr: *listen, Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	slog.Info("ledger: listening", "addr", *listen, "schema", *schema)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
