package load

import (
	"sync/atomic"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Scenario names a load scenario.
type Scenario string

// The load scenarios.
const (
	// First: every request carries a new key, so every request is a first
	// execution.
	First Scenario = "first"
	// Replay: every request retries one of the known keys, which have
	// completed before the run.
	Replay Scenario = "replay"
	// Mix: nine requests in ten are first calls and one is a retry of a
	// known key, about the traffic of clients that retry after timeouts.
	Mix Scenario = "mix"
)

// Scenarios are the load scenarios in the order they run.
var Scenarios = []Scenario{First, Replay, Mix}

// Known is the set of keys the replay and mix scenarios retry. They are
// sent once (Preload) before those scenarios.
type Known struct {
	Keys *Keys
	N    uint64
}

// Targeter returns the targets of scenario s. fresh makes the new keys;
// known holds the keys that are retried. Vegeta calls it from many
// workers: it only uses atomics.
func Targeter(s Scenario, req Request, fresh *Keys, known Known) vegeta.Targeter {
	var seq atomic.Uint64
	newKey := func(t *vegeta.Target) {
		k, i := fresh.Next()
		// Offset bodies so that they differ from the known keys'.
		req.target(t, k, i+1<<40)
	}
	oldKey := func(t *vegeta.Target, n uint64) {
		i := n % known.N
		req.target(t, known.Keys.Key(i), i)
	}
	return func(t *vegeta.Target) error {
		n := seq.Add(1) - 1
		switch {
		case s == First:
			newKey(t)
		case s == Replay:
			oldKey(t, n)
		case n%10 == 9:
			oldKey(t, n/10)
		default:
			newKey(t)
		}
		return nil
	}
}

// Finite returns a targeter of the known keys, each once, then
// ErrNoTargets: it preloads them.
func Finite(req Request, known Known) vegeta.Targeter {
	var seq atomic.Uint64
	return func(t *vegeta.Target) error {
		i := seq.Add(1) - 1
		if i >= known.N {
			return vegeta.ErrNoTargets
		}
		req.target(t, known.Keys.Key(i), i)
		return nil
	}
}
