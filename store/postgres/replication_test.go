package postgres

import "testing"

// TestStandbysWaitedFor reads synchronous_standby_names as PostgreSQL
// does: how many standbys a commit waits for.
func TestStandbysWaitedFor(t *testing.T) {
	t.Parallel()
	for names, want := range map[string]int{
		"":                     0,
		"  ":                   0,
		"replica1":             1,
		"replica1, replica2":   1,
		"*":                    1,
		"FIRST 2 (r1, r2, r3)": 2,
		"first 1 (r1)":         1,
		"ANY 2 (r1, r2, r3)":   2,
		"any 3(r1,r2,r3)":      3,
		"2 (r1, r2)":           2,
		`"FIRST" , r2`:         1, // a standby named FIRST, quoted
		"FIRST 10 (r1)":        10,
		"\"ANY 2 (x)\"":        1,
	} {
		if got := standbysWaitedFor(names); got != want {
			t.Errorf("standbysWaitedFor(%q) = %d; want %d", names, got, want)
		}
	}
}
