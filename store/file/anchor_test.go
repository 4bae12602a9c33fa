package file

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble"
	dto "github.com/prometheus/client_model/go"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
	"github.com/idem-dev/idem/store/storetest"
)

// BenchmarkAnchor sets the log's group commit against the floor a
// durable append has on this machine: Pebble's write-ahead log alone,
// two pebble.LogData(frame, pebble.Sync) per pair (no memtable, no
// index, no read), the frames as long as this store's reserve and
// complete frames. "log" runs durable reserve+complete pairs through the
// store; "log1" through the store with OneSync (the gateway's setting:
// the pair syncs once); "log1keep" likewise, the log's rotations leaving
// sweeps and reclaims to Cleanup (what compaction costs); "wal" the two
// appends; "wal1" one synced append of the same bytes, the floor of a
// first call that syncs once. Each reports the pairs an fdatasync covered
// (pairs/sync) beside pairs/s. The ratios
// log/wal and log/wal1 at one concurrency, runs interleaved (-count), say
// how close the group commit comes to Pebble's commit pipeline;
// docs/bench/FILE-LOG.md quotes them.
func BenchmarkAnchor(b *testing.B) {
	reserveLen, completeLen := anchorFrames()
	for _, conc := range []int{16, 64} {
		b.Run(fmt.Sprintf("c%d/log", conc), func(b *testing.B) {
			s, err := Open(b.TempDir(), quiet)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.RunRate(b, conc, "pairs/s", localtest.Pairs(s))
		})
		b.Run(fmt.Sprintf("c%d/log1", conc), func(b *testing.B) {
			anchorLog(b, conc, Options{Logger: quiet.Logger, OneSync: true})
		})
		b.Run(fmt.Sprintf("c%d/log1keep", conc), func(b *testing.B) {
			anchorLog(b, conc, Options{Logger: quiet.Logger, OneSync: true, cleanupOnly: true})
		})
		b.Run(fmt.Sprintf("c%d/wal", conc), func(b *testing.B) {
			db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: quietWAL{}})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			reserve, complete := make([]byte, reserveLen), make([]byte, completeLen)
			storetest.RunRate(b, conc, "pairs/s", func(uint64) error {
				if err := db.LogData(reserve, pebble.Sync); err != nil {
					return err
				}
				return db.LogData(complete, pebble.Sync)
			})
		})
		b.Run(fmt.Sprintf("c%d/wal1", conc), func(b *testing.B) {
			db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: quietWAL{}})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			pair := make([]byte, reserveLen+completeLen)
			syncs := func() uint64 {
				var m dto.Metric
				if err := db.Metrics().LogWriter.FsyncLatency.Write(&m); err != nil {
					b.Fatal(err)
				}
				return m.GetHistogram().GetSampleCount()
			}
			before := syncs()
			storetest.RunRate(b, conc, "pairs/s", func(uint64) error { return db.LogData(pair, pebble.Sync) })
			b.ReportMetric(float64(b.N)/float64(syncs()-before), "pairs/sync")
		})
	}
}

// anchorLog runs reserve+complete pairs from conc writers through a store
// opened with opts, and reports how many pairs an fdatasync covered.
func anchorLog(b *testing.B, conc int, opts Options) {
	s, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	before := s.log.syncs.Load()
	storetest.RunRate(b, conc, "pairs/s", localtest.Pairs(s))
	b.ReportMetric(float64(b.N)/float64(s.log.syncs.Load()-before), "pairs/sync")
}

// anchorFrames returns the lengths of a benchmark pair's two frames.
func anchorFrames() (int, int) {
	req := localtest.BenchRequest(0, 1)
	id, err := parseKeyHash(req.Record.KeyHash)
	if err != nil {
		panic(err)
	}
	r := req.Record
	reserve, _ := appendFrame(nil, kindPut, 1, id, &r, req.Lease)
	r.State, r.Value = store.Succeeded, localtest.BenchValue
	complete, _ := appendFrame(nil, kindPut, 2, id, &r, 0)
	return len(reserve), len(complete)
}

type quietWAL struct{}

func (quietWAL) Infof(string, ...any)         {}
func (quietWAL) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
