package goal

import "testing"

// TestDuelsCoverGoals: every goal has its duel, so none is left to the
// rounds by an omission in the list, and no duel runs twice.
func TestDuelsCoverGoals(t *testing.T) {
	have := map[Duel]bool{}
	for _, d := range Duels() {
		if have[d] {
			t.Errorf("duel %v twice", d)
		}
		have[d] = true
	}
	for _, r := range Ratios {
		if !have[r.Duel] {
			t.Errorf("no duel for goal %+v", r)
		}
	}
	for _, d := range Comparisons {
		if !have[d] {
			t.Errorf("no duel for comparison %+v", d)
		}
	}
	if len(have) != len(Ratios)+len(Comparisons) {
		t.Errorf("%d duels, want one per goal and comparison", len(have))
	}
}
