package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
)

// The crash and race tests' children are this test binary, re-run with
// these variables.
const (
	childEnv  = "IDEM_LEDGER_CHILD" // "crash" or "race"
	configEnv = "IDEM_LEDGER_CONFIG"
)

// childConfig tells a child where the ledger is and what to do.
type childConfig struct {
	DSN, Schema string
	// A crash child makes transfers First to First+Keys-1; a race child
	// transfers 0 to Keys-1.
	First, Keys int
	// KillAt is where a crash child stops to be killed: "reserved" (the
	// key is held, nothing written), "written" (inside the transaction,
	// before the commit), or "" (nowhere: it is killed at a random moment).
	KillAt     string
	Goroutines int // race children
}

var accounts = []string{"acct-a", "acct-b", "acct-c", "acct-d"}

const initialBalance = 1_000_000_000

// transferOf is the transfer behind key number i.
func transferOf(i int) (string, TransferRequest) {
	return "transfer-" + strconv.Itoa(i), TransferRequest{
		From: accounts[i%len(accounts)], To: accounts[(i+1)%len(accounts)], AmountCents: int64(100 + i),
	}
}

func openAccounts(t *testing.T, svc *Service) {
	t.Helper()
	for _, a := range accounts {
		if err := svc.Ledger.Open(bg, svc.Pool, a, initialBalance); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCrash kills a process making transfers with SIGKILL, round after
// round: at a random moment, inside a transfer's transaction, and between
// a key's reservation and its work. After every round the ledger's rows
// and the idempotency records agree exactly: each key is either completed
// with its one transfer (the one its record names) or has no transfer at
// all, and the money adds up. Then every key is retried, and none makes a
// second transfer. 50 rounds; IDEM_LONG=1 runs 300.
func TestCrash(t *testing.T) {
	t.Parallel()
	rounds := 50
	if os.Getenv("IDEM_LONG") != "" {
		rounds = 300
	}
	// Round r's child makes transfers r to r+7: each round brings a key
	// nobody has touched, so the child always reaches its kill point even
	// when the keys before it are all completed.
	const window = 8
	keys := rounds + window
	pool, dsn := newPool(t, 8)
	svc := newService(t, pool, idem.Policy{})
	openAccounts(t, svc)
	cfg := childConfig{DSN: dsn, Schema: svc.Ledger.Schema, Keys: window}
	points := map[string]int{}
	for round := range rounds {
		cfg.First = round
		cfg.KillAt = []string{"", "written", "reserved"}[round%3]
		c := startChild(t, "crash", cfg)
		if cfg.KillAt == "" {
			time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		} else if !c.WaitLine(cfg.KillAt, 30*time.Second) {
			t.Fatalf("round %d: the child never reached %q", round, cfg.KillAt)
		}
		_ = c.Cmd.Process.Signal(syscall.SIGKILL)
		_ = c.Cmd.Wait()
		points[cfg.KillAt]++
		done := checkAgreement(t, svc, keys)
		if t.Failed() {
			t.Fatalf("round %d (killed at %q): the ledger and the records disagree", round, cfg.KillAt)
		}
		if round == rounds-1 {
			t.Logf("%d rounds (killed at a random moment %d times, inside the transaction %d, between reservation and work %d); %d of %d keys completed before the retry",
				rounds, points[""], points["written"], points["reserved"], done, keys)
		}
	}

	// Retry every key after the dead holders' leases: each key ends with
	// exactly one transfer, and a completed key replays its own.
	time.Sleep(time.Second) // the dead holders' 300 ms leases run out on the server's clock
	later, err := openService(pool, svc.Ledger.Schema, idem.Policy{CleanupInterval: -1}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	before := takeSnapshot(t, svc).transfers
	for i := range keys {
		key, req := transferOf(i)
		tr, res, err := later.Transfer(bg, key, req)
		if err != nil {
			t.Fatalf("retry of %s: %v", key, err)
		}
		if old, ok := before[idem.RecordID(TransferScope, key)]; ok && (!res.Replayed || old[0] != tr.ID) {
			t.Fatalf("retry of completed %s: %+v, transfer %s; want its transfer %s replayed", key, res, tr.ID, old[0])
		}
	}
	if done := checkAgreement(t, svc, keys); done != keys {
		t.Fatalf("%d of %d keys completed after the retries", done, keys)
	}
}

// snapshot is the ledger and its records as one transaction saw them.
type snapshot struct {
	transfers map[string][]string // record ID -> transfer IDs
	moves     []TransferRequest
	balances  map[string]int64
	records   map[string]store.Record // key hash -> record (state, value)
}

// takeSnapshot reads everything in one REPEATABLE READ transaction: a
// killed child's COMMIT may still be in flight in the server, and reads
// from two snapshots could see half of it.
func takeSnapshot(t *testing.T, svc *Service) snapshot {
	t.Helper()
	sn := snapshot{transfers: map[string][]string{}, balances: map[string]int64{}, records: map[string]store.Record{}}
	err := pgx.BeginTxFunc(bg, svc.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, _ := tx.Query(bg, `SELECT record_id::text, id::text, from_account, to_account, amount_cents FROM `+svc.Ledger.table("transfers"))
		var rid, id string
		var m TransferRequest
		if _, err := pgx.ForEachRow(rows, []any{&rid, &id, &m.From, &m.To, &m.AmountCents}, func() error {
			sn.transfers[rid] = append(sn.transfers[rid], id)
			sn.moves = append(sn.moves, m)
			return nil
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(bg, `SELECT id, balance_cents FROM `+svc.Ledger.table("accounts"))
		var acct string
		var b int64
		if _, err := pgx.ForEachRow(rows, []any{&acct, &b}, func() error { sn.balances[acct] = b; return nil }); err != nil {
			return err
		}
		rows, _ = tx.Query(bg, `SELECT encode(key_hash, 'hex'), state, value FROM `+svc.Store.Table())
		var kh string
		var r store.Record
		_, err := pgx.ForEachRow(rows, []any{&kh, &r.State, &r.Value}, func() error { sn.records[kh] = r; return nil })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return sn
}

// checkAgreement checks that records and transfers agree exactly, and
// returns how many keys are completed.
func checkAgreement(t *testing.T, svc *Service, keys int) int {
	t.Helper()
	sn := takeSnapshot(t, svc)
	done, seen := 0, 0
	for i := range keys {
		key, _ := transferOf(i)
		ids := sn.transfers[idem.RecordID(TransferScope, key)]
		seen += len(ids)
		rec, ok := sn.records[store.HashKey(TransferScope, key)]
		switch {
		case !ok || rec.State == store.InProgress:
			if len(ids) != 0 {
				t.Errorf("%s: no completed record, but transfers %v", key, ids)
			}
		case rec.State == store.Succeeded:
			var tr Transfer
			if json.Unmarshal(rec.Value, &tr) != nil || len(ids) != 1 || ids[0] != tr.ID {
				t.Errorf("%s: record names transfer %q, the ledger has %v", key, tr.ID, ids)
			}
			done++
		default:
			t.Errorf("%s: record %s", key, rec.State)
		}
	}
	if seen != len(sn.moves) {
		t.Errorf("%d transfers belong to no key", len(sn.moves)-seen)
	}
	// Money is neither made nor lost, and each balance is what the
	// transfers say.
	want := map[string]int64{}
	for _, m := range sn.moves {
		want[m.From] -= m.AmountCents
		want[m.To] += m.AmountCents
	}
	for _, a := range accounts {
		if sn.balances[a] != initialBalance+want[a] {
			t.Errorf("%s: balance %d, the transfers say %d", a, sn.balances[a], initialBalance+want[a])
		}
	}
	return done
}

// startChild starts a copy of the test binary as a mode ("crash",
// "race") child with cfg.
func startChild(t *testing.T, mode string, cfg childConfig) *testkit.Child {
	t.Helper()
	b, _ := json.Marshal(cfg)
	return testkit.StartChild(t, childEnv+"="+mode, configEnv+"="+string(b))
}

// childMain is the body of a child process.
func childMain(mode string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "ledger child:", err)
		return 2
	}
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger child:", err)
		return 2
	}
	// Ten connections for a hundred racers still queue many on one key's
	// row locks, and keep the three processes of TestRace (30) well under
	// the server's 100 that other tests and packages share.
	pc.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger child:", err)
		return 2
	}
	defer pool.Close()
	switch mode {
	case "crash":
		return crashChild(ctx, pool, cfg)
	case "race":
		return raceChild(ctx, pool, cfg)
	}
	return 2
}

// crashChild makes transfers, in random order, over and over, until it is
// killed; with cfg.KillAt it stops at that point of its first transfer.
func crashChild(ctx context.Context, pool *pgxpool.Pool, cfg childConfig) int {
	// A short lease, so that the next round takes over what this one left.
	svc, err := openService(pool, cfg.Schema, idem.Policy{Lease: 300 * time.Millisecond, CleanupInterval: -1}, quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger child:", err)
		return 2
	}
	var once sync.Once
	svc.hook = func(p string) {
		if p == cfg.KillAt {
			once.Do(func() { fmt.Println(p) })
			select {} // until SIGKILL
		}
	}
	for {
		for _, i := range rand.Perm(cfg.Keys) {
			key, req := transferOf(cfg.First + i)
			if _, _, err := svc.Transfer(ctx, key, req); err != nil && !errors.Is(err, idem.ErrInProgress) {
				fmt.Fprintln(os.Stderr, "ledger child:", key, err)
			}
		}
	}
}
