package history

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-dev/idem/store"
)

// checkTimeout bounds porcupine's search. A history of Config's default
// size checks in well under a second; one that is still unsettled after
// this long fails rather than passes.
const checkTimeout = 5 * time.Minute

// Check records a history of random operations on s and peer (a second
// client of the same backend; nil or s itself when the store has none)
// and fails t unless it is linearizable. A history that is not is drawn
// to an HTML file whose path the failure names.
func Check(t testing.TB, s, peer store.Store) {
	t.Helper()
	if peer == s {
		peer = nil
	}
	h := Record(context.Background(), Config{}, s, peer)
	verify(t, h)
}

// verify fails t unless h is linearizable and did what it is for: some
// reservations acquired, and at least one stale holder taken over.
func verify(t testing.TB, h *History) {
	t.Helper()
	start := time.Now()
	res, info := h.Check(checkTimeout)
	t.Logf("%d operations checked in %v: %s (%s)", h.Len(), time.Since(start).Round(time.Millisecond), res, h.summary())
	if res != porcupine.Ok {
		t.Errorf("the history is not linearizable (%s); drawn in %s", res, visualize(t, h, info))
	}
	n := h.Counts()
	if n["reserve acquired"] == 0 || n["reserve took over"] == 0 {
		t.Errorf("no reservation acquired or none took over a stale holder: the history tested little")
	}
}

// visualize draws h to a file kept after the test, and returns its path.
func visualize(t testing.TB, h *History, info porcupine.LinearizationInfo) string {
	f, err := os.CreateTemp("", "idem-history-*.html")
	if err != nil {
		t.Logf("visualization: %v", err)
		return "(no file)"
	}
	defer f.Close()
	if err := porcupine.Visualize(model(h.slack), info, f); err != nil {
		t.Logf("visualization: %v", err)
	}
	return f.Name()
}
