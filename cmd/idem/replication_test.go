package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/gateway/dsn"
	"github.com/idem-dev/idem/internal/gateway/metrics"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/replication"
)

// TestLogReplication: the gateway says at start, in one line, how the
// store replicates and what a failover would do to the promise: a warning
// naming idem_sync_replicas for asynchronous replicas, information
// otherwise, and idem_store_replication shows the mode.
func TestLogReplication(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		st    replication.Status
		level string
		says  string
	}{
		{replication.Status{Mode: replication.None}, "INFO", "no replica"},
		{replication.Status{Mode: replication.Async, Replicas: 2}, "WARN", "set idem_sync_replicas=N"},
		{replication.Status{Mode: replication.Sync, Replicas: 1, Synchronous: 1, SyncReplicas: 1}, "INFO", "every write waits for 1 replica(s)"},
		{replication.Status{Mode: replication.Unknown}, "WARN", "pg_monitor"},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		met := metrics.New()
		logReplication(log, &tc.st, met)
		out := buf.String()
		if strings.Count(out, "\n") != 1 || !strings.Contains(out, "level="+tc.level) || !strings.Contains(out, tc.says) ||
			!strings.Contains(out, "mode="+string(tc.st.Mode)) {
			t.Errorf("%s: logged %q; want one %s line saying %q", tc.st.Mode, out, tc.level, tc.says)
		}
		mfs, err := met.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, mf := range mfs {
			if mf.GetName() != "idem_store_replication" {
				continue
			}
			for _, m := range mf.GetMetric() {
				seen++
				mode := m.GetLabel()[0].GetValue()
				want := 0.0
				if mode == string(tc.st.Mode) {
					want = 1
				}
				if got := m.GetGauge().GetValue(); got != want {
					t.Errorf("%s: idem_store_replication{mode=%q} = %v; want %v", tc.st.Mode, mode, got, want)
				}
			}
		}
		if seen != len(replication.Modes) {
			t.Errorf("%s: idem_store_replication has %d series; want %d", tc.st.Mode, seen, len(replication.Modes))
		}
	}
}

// reporting is a store whose replication a test sets.
type reporting struct {
	store.Store
	mu sync.Mutex
	st replication.Status
}

func (r *reporting) Replication(context.Context) (replication.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st, nil
}

func (r *reporting) set(st replication.Status) {
	r.mu.Lock()
	r.st = st
	r.mu.Unlock()
}

// TestWatchReplication: a running gateway reads again how its store
// replicates: a synchronous standby that went away shows in the metric and
// in a warning line.
func TestWatchReplication(t *testing.T) {
	t.Parallel()
	sync1 := replication.Status{Mode: replication.Sync, Replicas: 1, Synchronous: 1}
	st := &reporting{Store: memory.New(), st: sync1}
	var buf syncBuffer
	s := &server{log: slog.New(slog.NewTextHandler(&buf, nil)), opened: &dsn.Opened{Store: st, Replication: &sync1}}
	met := metrics.New()
	met.SetReplication(sync1)
	s.watchReplication(met, 5*time.Millisecond)
	st.set(replication.Status{Mode: replication.Async, Replicas: 1})
	for i := 0; !strings.Contains(buf.String(), "level=WARN"); i++ {
		if i == 2000 {
			t.Fatalf("no warning after the standby turned asynchronous: %q", buf.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.stopWatch()
	if out := buf.String(); !strings.Contains(out, "store replication changed") || !strings.Contains(out, "to=async") {
		t.Errorf("logged %q; want the change from sync to async", out)
	}
	mfs, err := met.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "idem_store_replication" && m.GetLabel()[0].GetValue() == "async" && m.GetGauge().GetValue() != 1 {
				t.Errorf("idem_store_replication{mode=async} = %v; want 1", m.GetGauge().GetValue())
			}
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutine and the
// test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
