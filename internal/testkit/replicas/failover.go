package replicas

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/replication"
)

// FailoverTest is one store's failover test: s on a primary with a
// replica, failover that store's Failover.
type FailoverTest struct {
	Store    store.Store
	Failover func()
	// SyncReplicas is the store's setting: with it no key may run twice
	// and no answered outcome change.
	SyncReplicas int
	// Lease is the engine's: how long a lost completion keeps its key
	// before a retry runs it again. With SyncReplicas it is raised to
	// SyncLease.
	Lease time.Duration
}

// SyncLease is the engine's lease with SyncReplicas: nothing is lost, so
// nothing waits it out, and it keeps a holder's key through a failover
// that a loaded machine makes long (a store outage longer than the lease
// lets a retry take a live holder's key over: docs/stores/FAILOVER.md).
const SyncLease = 30 * time.Second

// RunFailover checks how the store replicates (sync with SyncReplicas,
// async without), runs 300 keys with 12 clients through an engine over it
// while the primary fails over twice (Load), logs what it saw, and checks
// it: every key answered; with SyncReplicas no key run twice, no answered
// outcome changed and no record lost (idem.WithOnRecordLost). Without
// SyncReplicas the losses vary from run to run: they are logged, not
// asserted. A holder whose record was lost writes its outcome back
// (WithOnRecordLost), so a lost record is no longer always a holder
// answered ErrLeaseLost.
func RunFailover(t *testing.T, ft FailoverTest) {
	t.Helper()
	st, err := ft.Store.(replication.Reporter).Replication(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := replication.Async
	if ft.SyncReplicas > 0 {
		want = replication.Sync
	}
	if st.Mode != want {
		t.Fatalf("Replication: %+v; want mode %s", st, want)
	}
	if ft.SyncReplicas > 0 {
		ft.Lease = SyncLease
	}
	var lost atomic.Int64 // records the store lost under their holders
	wb := &writeBacks{}
	eng := idem.New(ft.Store, idem.Policy{Lease: ft.Lease, TTL: time.Hour, CleanupInterval: -1},
		idem.WithLogger(slog.New(wb)), idem.WithOnRecordLost(func(string) { lost.Add(1) }))
	defer eng.Close()
	rep := Load(t, eng, func(int) { ft.Failover() },
		LoadOptions{Keys: 300, Workers: 12, Failovers: 2, Work: time.Millisecond})
	t.Logf("sync_replicas=%d: %s; %d records lost (WithOnRecordLost): %d written back, %d dropped for another call's reservation",
		ft.SyncReplicas, rep, lost.Load(), wb.written.Load(), wb.dropped.Load())
	if n := lost.Load(); ft.SyncReplicas > 0 && n > 0 {
		t.Errorf("with sync_replicas=%d: %d records counted lost", ft.SyncReplicas, n)
	}
	if len(rep.Unanswered) > 0 {
		t.Errorf("keys never answered: %v", rep.Unanswered)
	}
	if ft.SyncReplicas > 0 && (len(rep.RanTwice) > 0 || len(rep.Changed) > 0) {
		t.Errorf("with sync_replicas=%d: %d keys ran twice, %d answered outcomes changed",
			ft.SyncReplicas, len(rep.RanTwice), len(rep.Changed))
	}
}

// BenchDelay is the replication link's delay a benchmark asks for in
// IDEM_BENCH_DELAY (a duration; none when unset).
func BenchDelay(b *testing.B) time.Duration {
	v := os.Getenv("IDEM_BENCH_DELAY")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		b.Fatalf("IDEM_BENCH_DELAY=%q: %v", v, err)
	}
	return d
}

// writeBacks counts, from the engine's log, the lost records' outcomes
// written back and those dropped because another call reserved the key
// first; it discards the rest.
type writeBacks struct {
	written, dropped atomic.Int64
}

func (w *writeBacks) Enabled(context.Context, slog.Level) bool { return true }

func (w *writeBacks) Handle(_ context.Context, r slog.Record) error {
	switch {
	case strings.Contains(r.Message, "outcome written back"):
		w.written.Add(1)
	case strings.Contains(r.Message, "before a lost record's outcome was written back"):
		w.dropped.Add(1)
	}
	return nil
}

func (w *writeBacks) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *writeBacks) WithGroup(string) slog.Handler      { return w }
