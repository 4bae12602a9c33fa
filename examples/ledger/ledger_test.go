package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	testkit.VerifyTestMain(m)
}

var bg = context.Background()

var quiet = idem.WithLogger(slog.New(slog.DiscardHandler))

// newPool connects to the test server.
func newPool(t testing.TB, maxConns int32) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := testenv.Postgres(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, dsn
}

// newService migrates a schema of its own, dropped when t ends.
func newService(t testing.TB, pool *pgxpool.Pool, p idem.Policy, opts ...idem.Option) *Service {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := fmt.Sprintf("ledger_test_%d_%s", os.Getpid(), hex.EncodeToString(b))
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	if p.CleanupInterval == 0 {
		p.CleanupInterval = -1
	}
	svc, err := NewService(bg, pool, schema, p, append([]idem.Option{quiet}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	return svc
}

func post(t *testing.T, url, key, body string) (int, []byte, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/transfers", bytes.NewBufferString(body))
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header
}

func (s *Service) rows(t testing.TB) int {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(bg, `SELECT count(*) FROM `+s.Ledger.table("transfers")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHTTP: a transfer over HTTP runs once per key; a retry replays it; a
// refused transfer leaves nothing and frees its key.
func TestHTTP(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t, 8)
	svc := newService(t, pool, idem.Policy{})
	for _, a := range []string{"alice", "bob"} {
		if err := svc.Ledger.Open(bg, pool, a, 1000); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()

	code, first, _ := post(t, srv.URL, "t-1", `{"from":"alice","to":"bob","amount_cents":300}`)
	if code != http.StatusCreated {
		t.Fatalf("first: %d %s", code, first)
	}
	code, again, h := post(t, srv.URL, "t-1", `{"from":"alice","to":"bob","amount_cents":300}`)
	if code != http.StatusCreated || !bytes.Equal(again, first) || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s %v", code, again, h)
	}
	if code, body, _ := post(t, srv.URL, "t-1", `{"from":"alice","to":"bob","amount_cents":999}`); code != http.StatusUnprocessableEntity {
		t.Fatalf("same key, other transfer: %d %s", code, body)
	}
	if code, body, _ := post(t, srv.URL, "t-2", `{"from":"alice","to":"bob","amount_cents":5000}`); code != http.StatusUnprocessableEntity {
		t.Fatalf("insufficient funds: %d %s", code, body)
	}
	if err := svc.Ledger.Open(bg, pool, "alice", 10_000); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := post(t, srv.URL, "t-2", `{"from":"alice","to":"bob","amount_cents":5000}`); code != http.StatusCreated {
		t.Fatalf("the refused key, once funded: %d %s", code, body)
	}
	if n := svc.rows(t); n != 2 {
		t.Fatalf("%d transfers, want 2", n)
	}
	if b, _ := svc.Ledger.Balance(bg, pool, "bob"); b != 1000+300+5000 {
		t.Fatalf("bob has %d", b)
	}
	var tr Transfer
	if err := json.Unmarshal(first, &tr); err != nil || tr.ID == "" {
		t.Fatalf("response %s: %v", first, err)
	}
}

// TestRetryAfterTakeover: the Go API path, with a holder that stalls past
// its lease: the caller that takes over makes the one transfer.
func TestRetryAfterTakeover(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t, 8)
	const lease = 500 * time.Millisecond
	svc := newService(t, pool, idem.Policy{Lease: lease})
	for _, a := range []string{"alice", "bob"} {
		if err := svc.Ledger.Open(bg, pool, a, 1000); err != nil {
			t.Fatal(err)
		}
	}
	other, err := openService(pool, svc.Ledger.Schema, idem.Policy{Lease: lease, CleanupInterval: -1}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	written, resume := make(chan struct{}), make(chan struct{})
	svc.hook = func(p string) {
		if p == "written" {
			close(written)
			<-resume
		}
	}
	req := TransferRequest{From: "alice", To: "bob", AmountCents: 100}
	stale := make(chan error, 1)
	go func() { _, _, err := svc.Transfer(bg, "k", req); stale <- err }()
	<-written
	// The caller taking over waits for the stale holder's row locks on the
	// accounts; the stale holder then wakes up, fails to complete, and
	// rolls back, which lets the new holder through.
	type result struct {
		res idem.Result
		err error
	}
	took := make(chan result, 1)
	reserved := make(chan struct{})
	other.hook = func(p string) {
		if p == "reserved" {
			close(reserved)
		}
	}
	// The stale holder's renewals stop reaching the server (its record's
	// row is locked, as by a stalled process's lost connection) until its
	// lease has run out there; the holder gives it up first.
	records := pgx.Identifier{svc.Ledger.Schema, "idem_records"}.Sanitize()
	lock, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(bg, "SELECT 1 FROM "+records+" WHERE key_hash = decode($1, 'hex') FOR UPDATE", store.HashKey(TransferScope, "k")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * lease)
	if err := lock.Commit(bg); err != nil {
		t.Fatal(err)
	}
	go func() {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(lease / 4) {
			_, res, err := other.Transfer(bg, "k", req)
			if errors.Is(err, idem.ErrInProgress) && time.Now().Before(deadline) {
				continue
			}
			took <- result{res, err}
			return
		}
	}()
	select {
	case <-reserved: // the takeover is committed
	case r := <-took:
		t.Fatalf("takeover: %+v %v", r.res, r.err)
	}
	close(resume)
	if err := <-stale; err == nil {
		t.Fatal("the stale holder committed")
	}
	if r := <-took; r.err != nil || !r.res.TookOver {
		t.Fatalf("takeover: %+v %v", r.res, r.err)
	}
	if n := svc.rows(t); n != 1 {
		t.Fatalf("%d transfers, want 1", n)
	}
	if b, _ := svc.Ledger.Balance(bg, pool, "alice"); b != 900 {
		t.Fatalf("alice has %d, want 900", b)
	}
}
