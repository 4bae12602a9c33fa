package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/idem-dev/idem/internal/gateway/metrics"
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
