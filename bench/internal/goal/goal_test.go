package goal

import "testing"

// TestDuelsCoverGoals: every goal has its duel, so none is left to the
// rounds by an omission in the list.
func TestDuelsCoverGoals(t *testing.T) {
	have := map[Duel]bool{}
	for _, d := range Duels() {
		if have[d] {
			t.Errorf("duel %v twice", d)
		}
		have[d] = true
	}
	for _, r := range Ratios {
		if !have[Duel{Contender: r.Contender, Baseline: r.Baseline, Scenario: r.Scenario}] {
			t.Errorf("no duel for goal %+v", r)
		}
	}
	for _, o := range Overheads {
		if !have[o.Idem] || !have[o.Peer] {
			t.Errorf("no duels for %+v", o)
		}
	}
	for _, d := range Comparisons {
		if !have[d] {
			t.Errorf("no duel for comparison %+v", d)
		}
	}
	if len(have) != 8+len(Comparisons) {
		t.Errorf("%d duels, want the eight of the goals and the comparisons", len(have))
	}
}
