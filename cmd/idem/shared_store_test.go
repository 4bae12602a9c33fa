package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// TestSharedStore: two gateways on one PostgreSQL or Redis store keep the
// guarantee between them: of 60 concurrent requests with one key, spread
// over both, exactly one runs the upstream.
func TestSharedStore(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		dsn, _ := pgSchema(t, "idem_e2e")
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

// sharedStore runs three gateways on one store: 20 keys, each sent 15 times
// at once to gateways picked at random. Every key runs the upstream exactly
// once, and every success for a key carries the same body.
func sharedStore(t *testing.T, dsn string) {
	a := startAPI(t)
	gws := []*gw{
		startGateway(t, a.URL, "", "", "--store", dsn),
		startGateway(t, a.URL, "", "", "--store", dsn),
		startGateway(t, a.URL, "", "", "--store", dsn),
	}
	const keys, calls = 20, 15
	prefix := fmt.Sprintf("shared-%d-", rand.Uint32())
	type result struct {
		key  int
		gw   int
		resp response
		err  error
	}
	results := make([]result, keys*calls)
	testkit.FanOut(keys*calls, func(i int) {
		k, g := i/calls, rand.IntN(len(gws))
		body := fmt.Sprintf(`{"amount": %d, "currency": "eur"}`, 100+k)
		r, err := tryPost(context.Background(), gws[g].URL+"/charges?delay=200ms", body, "Idempotency-Key", prefix+fmt.Sprint(k))
		results[i] = result{k, g, r, err}
	})
	bodies := map[int]map[string]bool{}
	perGateway := map[int]int{}
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Fatalf("key %d via gateway %d: %v", r.key, r.gw, r.err)
		case r.resp.Status == 201:
			if bodies[r.key] == nil {
				bodies[r.key] = map[string]bool{}
			}
			bodies[r.key][string(r.resp.Body)] = true
		case r.resp.Status == 409:
			if p := r.resp.problem(t); p["conflict_type"] != "in_progress" {
				t.Errorf("409 %v", p)
			}
		default:
			t.Errorf("key %d: status %d %s", r.key, r.resp.Status, r.resp.Body)
		}
		perGateway[r.gw]++
	}
	stats := a.stats(t)
	for k := range keys {
		if n := stats.Executions[prefix+fmt.Sprint(k)]; n != 1 {
			t.Errorf("key %d executed %d times upstream, want 1", k, n)
		}
		if len(bodies[k]) != 1 {
			t.Errorf("key %d: %d different success bodies, want 1", k, len(bodies[k]))
		}
	}
	t.Logf("requests per gateway: %v", perGateway)
	// Each gateway replays what the others recorded, byte for byte.
	for k := range keys {
		want := ""
		for b := range bodies[k] {
			want = b
		}
		g := gws[k%len(gws)]
		r := post(t, g.URL+"/charges?delay=200ms", fmt.Sprintf(`{"currency":"eur","amount":%d}`, 100+k), "Idempotency-Key", prefix+fmt.Sprint(k))
		if r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" || string(r.Body) != want {
			t.Errorf("replay of key %d via %s: %d %v %s", k, g.URL, r.Status, r.Header, r.Body)
		}
	}
	if stats := a.stats(t); stats.Charges != keys {
		t.Errorf("%d charges upstream after the replays, want %d", stats.Charges, keys)
	}
	for _, g := range gws {
		if err := g.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
}

// pgSchema returns the DSN of the test PostgreSQL server with a schema of
// its own (named prefix_N), dropped when t ends, and the schema's name.
func pgSchema(t *testing.T, prefix string) (dsn, schema string) {
	t.Helper()
	base := testenv.Postgres(t)
	schema = fmt.Sprintf("%s_%d", prefix, rand.Uint32())
	t.Cleanup(func() {
		ctx := context.Background()
		if pool, err := pgxpool.New(ctx, base); err == nil {
			_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			pool.Close()
		}
	})
	return withParam(base, "idem_schema="+schema), schema
}

// migratedSchema is pgSchema's DSN with idem's tables made in the schema
// by `idem migrate`.
func migratedSchema(t *testing.T, prefix string) string {
	t.Helper()
	dsn, _ := pgSchema(t, prefix)
	if out, errOut, err := runIdem(t, "migrate", "--store", dsn); err != nil {
		t.Fatalf("migrate: %v %s %s", err, out, errOut)
	}
	return dsn
}

func withParam(dsn, param string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + param
	}
	return dsn + "?" + param
}
