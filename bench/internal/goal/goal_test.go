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
	if len(have) != 8 {
		t.Errorf("%d duels, want the eight of the goals", len(have))
	}
}
