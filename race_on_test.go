//go:build race

package idem_test

// raceEnabled: the race detector makes sync.Pool drop what it is given at
// random, so that allocation counts of pooled paths are not the product's.
const raceEnabled = true
