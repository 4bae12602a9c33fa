package history

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-dev/idem/store"
)

// checkTimeout bounds porcupine's search. A history of Config's default
// size checks in well under a second; one that is still unsettled after
// this long fails rather than passes.
const checkTimeout = 5 * time.Minute

// Check records a history of random operations shaped by cfg (its zero
// value will do) on stores, clients of one backend (a store and a second
// client of it, as another process would have, where it has one; the same
// store given twice counts once), and fails t unless it is linearizable.
// A history that is not is drawn to an HTML file whose path the failure
// names, and the operations of a key that cannot be ordered are listed.
func Check(t testing.TB, cfg Config, stores ...store.Store) {
	t.Helper()
	var distinct []store.Store
	for _, s := range stores {
		if s != nil && !slices.ContainsFunc(distinct, func(d store.Store) bool { return same(d, s) }) {
			distinct = append(distinct, s)
		}
	}
	verify(t, Record(context.Background(), cfg, distinct...))
}

// same reports whether a and b are the same store, without comparing
// values whose type cannot be (== would panic).
func same(a, b store.Store) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// verify fails t unless h is linearizable and did what it is for: some
// reservations acquired, and at least one stale holder taken over.
func verify(t testing.TB, h *History) {
	t.Helper()
	start := time.Now()
	res, info := h.Check(checkTimeout)
	t.Logf("%d operations checked in %v: %s (%s)", h.Len(), time.Since(start).Round(time.Millisecond), res, h.summary())
	switch res {
	case porcupine.Unknown:
		t.Errorf("the checker did not decide within %v", checkTimeout)
	case porcupine.Illegal:
		t.Errorf("the history is not linearizable; drawn in %s\n%s", visualize(t, h, info), explain(h, info))
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

// explain returns the operations of the first key whose history has no
// linearization, around where the longest partial one stops: the last
// operations it could place and those it could not.
func explain(h *History, info porcupine.LinearizationInfo) string {
	parts := info.PartialLinearizationsOperations()
	for _, p := range parts {
		longest := slices.MaxFunc(p, func(a, b []porcupine.Operation) int { return len(a) - len(b) })
		if len(longest) == 0 {
			continue
		}
		first := slices.IndexFunc(longest, func(op porcupine.Operation) bool { return op.Input.(input).Kind != opCrash })
		if first < 0 {
			continue
		}
		key := longest[first].Input.(input).Key
		var ops []porcupine.Operation
		for _, op := range h.ops {
			if in := op.Input.(input); in.Key == key || in.Kind == opCrash {
				ops = append(ops, op)
			}
		}
		if len(longest) == len(ops) {
			continue // this key's history is linearizable
		}
		placed := map[int64]bool{} // by call time and client
		for _, op := range longest {
			placed[op.Call*1000+int64(op.ClientId)] = true
		}
		last := longest[len(longest)-1]
		var b strings.Builder
		fmt.Fprintf(&b, "key %s: %d of %d operations placed; the last placed (=>) and those around it, ok if placed, times in ms from the key's first call:\n", key, len(longest), len(ops))
		t0 := ops[0].Call
		ms := func(t int64) string {
			if t == never {
				return "never"
			}
			return fmt.Sprintf("%.3f", float64(t-t0)/1e6)
		}
		at := slices.IndexFunc(ops, func(op porcupine.Operation) bool {
			return op.Call == last.Call && op.ClientId == last.ClientId
		})
		for _, op := range ops[max(0, at-20):min(len(ops), at+15)] {
			mark := "  "
			if placed[op.Call*1000+int64(op.ClientId)] {
				mark = "ok"
			}
			if op.Call == last.Call && op.ClientId == last.ClientId {
				mark = "=>"
			}
			fmt.Fprintf(&b, "%s client %d [%s, %s] %s\n", mark, op.ClientId, ms(op.Call), ms(op.Return), describe(op.Input, op.Output))
		}
		return b.String()
	}
	return ""
}
