package report

// why explains a goal this harness's runs did not meet: the cause the
// measurements and profiles point at, and what would close the gap. Keyed
// by the goal (its goal.Duel printed with %v, or a key of goals.go).
var why = map[string]string{}
