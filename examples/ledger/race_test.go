package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
)

const (
	raceProcs      = 3   // processes, this one included
	raceGoroutines = 100 // per process
	raceKeys       = 30
)

// TestRace: 100 goroutines in each of 3 processes make the same transfers
// (every goroutine every key, in its own random order): each transfer
// exists once, and every caller got the same transfer back for a key.
// Not parallel: its three processes hold up to 30 PostgreSQL connections
// of the server's 100, which other packages' tests share at the same time.
func TestRace(t *testing.T) {
	pool, dsn := newPool(t, 10)
	svc := newService(t, pool, idem.Policy{})
	openAccounts(t, svc)
	cfg := childConfig{DSN: dsn, Schema: svc.Ledger.Schema, Keys: raceKeys, Goroutines: raceGoroutines}
	var children []*testkit.Child
	for range raceProcs - 1 {
		children = append(children, startChild(t, "race", cfg))
	}
	testkit.ReleaseTogether(t, children...)
	lines := race(bg, pool, cfg)
	for i, c := range children {
		for l := range c.Lines {
			lines = append(lines, l)
		}
		if err := c.Cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	if want := raceProcs * raceGoroutines * raceKeys; len(lines) != want {
		t.Fatalf("%d results, want %d", len(lines), want)
	}
	got := map[string]map[string]int{}
	for _, l := range lines {
		key, id, _ := strings.Cut(l, " ")
		if strings.HasPrefix(id, "error") {
			t.Fatalf("%s: %s", key, id)
		}
		if got[key] == nil {
			got[key] = map[string]int{}
		}
		got[key][id]++
	}
	byRecord := takeSnapshot(t, svc).transfers
	for i := range raceKeys {
		key, _ := transferOf(i)
		ids := byRecord[idem.RecordID(TransferScope, key)]
		if len(ids) != 1 || len(got[key]) != 1 || got[key][ids[0]] != raceProcs*raceGoroutines {
			t.Errorf("%s: transfers %v in the ledger; callers got %v", key, ids, got[key])
		}
	}
	if done := checkAgreement(t, svc, raceKeys); done != raceKeys {
		t.Fatalf("%d of %d keys completed", done, raceKeys)
	}
}

// race runs cfg.Goroutines callers that make every transfer, and returns a
// line "KEY TRANSFER_ID" per call.
func race(ctx context.Context, pool *pgxpool.Pool, cfg childConfig) []string {
	// Callers that find a transfer in progress wait for its outcome.
	svc, err := openService(pool, cfg.Schema, idem.Policy{Wait: time.Minute, CleanupInterval: -1}, quiet)
	if err != nil {
		return []string{"setup error: " + err.Error()}
	}
	defer svc.Close()
	var (
		mu    sync.Mutex
		lines []string
		wg    sync.WaitGroup
	)
	for range cfg.Goroutines {
		wg.Go(func() {
			for _, i := range rand.Perm(cfg.Keys) {
				key, req := transferOf(i)
				tr, _, err := svc.Transfer(ctx, key, req)
				l := key + " " + tr.ID
				if err != nil {
					l = key + " error: " + err.Error()
				}
				mu.Lock()
				lines = append(lines, l)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lines
}

// raceChild waits for "go", races, and prints its lines.
func raceChild(ctx context.Context, pool *pgxpool.Pool, cfg childConfig) int {
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "ledger child:", errors.New("no start"))
		return 2
	}
	for _, l := range race(ctx, pool, cfg) {
		fmt.Println(l)
	}
	return 0
}
