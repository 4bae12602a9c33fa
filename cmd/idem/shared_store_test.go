package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testenv"
)

// TestSharedStore: two gateways on one PostgreSQL or Redis store keep the
// guarantee between them: of 60 concurrent requests with one key, spread
// over both, exactly one runs the upstream.
func TestSharedStore(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		base := testenv.Postgres(t)
		schema := fmt.Sprintf("idem_e2e_%d", rand.Uint32())
		dsn := withParam(base, "idem_schema="+schema)
		t.Cleanup(func() {
			ctx := context.Background()
			if pool, err := pgxpool.New(ctx, base); err == nil {
				_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
				pool.Close()
			}
		})
		out, errOut, err := runIdem(t, "migrate", "--store", dsn)
		if err != nil || !strings.Contains(out, "schema at version") {
			t.Fatalf("migrate: %v %s %s", err, out, errOut)
		}
		sharedStore(t, dsn)
		out, errOut, err = runIdem(t, "cleanup", "--store", dsn, "--dry-run")
		if err != nil || !strings.Contains(out, "0 expired records") {
			t.Errorf("cleanup --dry-run: %v %s %s", err, out, errOut)
		}
	})
	t.Run("redis", func(t *testing.T) {
		url := testenv.Redis(t)
		sharedStore(t, withParam(url, fmt.Sprintf("idem_prefix=idem-e2e-%d:", rand.Uint32())))
	})
}

func sharedStore(t *testing.T, dsn string) {
	a := startAPI(t)
	g1 := startGateway(t, a.URL, "", "", "--store", dsn)
	g2 := startGateway(t, a.URL, "", "", "--store", dsn)
	const n = 60
	var wg sync.WaitGroup
	results := make([]response, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := g1.URL
			if i%2 == 1 {
				url = g2.URL
			}
			results[i], errs[i] = tryPost(context.Background(), url+"/charges?delay=300ms", chargeBody, "Idempotency-Key", "shared-1")
		}()
	}
	wg.Wait()
	ok := 0
	for i, r := range results {
		switch {
		case errs[i] != nil:
			t.Fatalf("request %d: %v", i, errs[i])
		case r.Status == 201:
			ok++
		case r.Status != 409:
			t.Errorf("status %d %s", r.Status, r.Body)
		}
	}
	if got := a.stats(t).Executions["shared-1"]; got != 1 || ok == 0 {
		t.Fatalf("executions = %d (%d × 201), want 1", got, ok)
	}
	// Each gateway replays what the other recorded.
	for _, g := range []*gw{g1, g2} {
		r := post(t, g.URL+"/charges?delay=300ms", chargeBody, "Idempotency-Key", "shared-1")
		if r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay via %s: %d %v", g.URL, r.Status, r.Header)
		}
	}
	for _, g := range []*gw{g1, g2} {
		if err := g.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
}

func withParam(dsn, param string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + param
	}
	return dsn + "?" + param
}
