package report

import (
	"path/filepath"
	"testing"

	"github.com/idem-dev/idem/bench/internal/results"
)

// TestChartsOfOnePoint: a scale stage that stopped after one measurement
// still draws its charts (a log axis of one value is widened, not padded
// below zero).
func TestChartsOfOnePoint(t *testing.T) {
	dir := t.TempDir()
	if err := cleanupChart(filepath.Join(dir, "c.png"), []results.Cleanup{{Store: "file", LiveKeys: 10000, Expired: 1000, Deleted: 1000, Seconds: 0.0016}}); err != nil {
		t.Fatal(err)
	}
	if err := scaleChart(filepath.Join(dir, "s.png"), "reserve new key", []results.Latency{{Store: "file", Op: "reserve new key", LiveKeys: 10000, P50: 0.2, P99: 1.1}}); err != nil {
		t.Fatal(err)
	}
}
