// Package runner runs the contenders in turn, round after round, through
// the load and race scenarios, and collects what they did. It also runs the
// duels that decide the goals: a contender and its baseline side by side,
// the load alternating between them (duel.go).
package runner

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/idem-dev/idem/bench/internal/contender"
	"github.com/idem-dev/idem/bench/internal/load"
	"github.com/idem-dev/idem/bench/internal/results"
)

// Options configures Run.
type Options struct {
	Setup  contender.Setup
	Rounds int
	// Warmup runs before each measured run, with the same traffic; it is
	// not counted.
	Warmup      time.Duration
	Duration    time.Duration
	Connections int
	KnownKeys   int
	RaceKeys    int
	RacePerKey  int
	RaceDelay   time.Duration
	// Only, when not empty, lists the contender IDs to run.
	Only []string
	// Scenarios, when not empty, lists the load scenarios to run.
	Scenarios []load.Scenario
	// Work is a directory for logs and the contenders' files.
	Work string
	// DuelSlice is how long each side of a duel gets the load at a time;
	// DuelPairs how many A B pairs of slices a duel measures.
	DuelSlice time.Duration
	DuelPairs int
	// DuelListen and DuelAdmin are where a duel's baseline listens, its
	// contender being at Setup.Listen and Setup.Admin.
	DuelListen, DuelAdmin string
}

// Run measures every contender and adds what it found to doc.
func Run(ctx context.Context, opts Options, doc *results.Doc) error {
	var cs []contender.Contender
	for _, c := range contender.All() {
		if len(opts.Only) == 0 || slices.Contains(opts.Only, c.ID) {
			cs = append(cs, c)
		}
	}
	scenarios := opts.Scenarios
	if len(scenarios) == 0 {
		scenarios = load.Scenarios
	}
	failed := map[string]string{}
	// Round-robin: A B C ... A B C, so that drift over the run (other work
	// on the machine, thermal state) is spread over every contender.
	for round := 1; round <= opts.Rounds; round++ {
		for _, c := range cs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, ok := failed[c.ID]; ok {
				continue
			}
			log.Printf("round %d/%d: %s", round, opts.Rounds, c.Name)
			runs, race, err := runOne(ctx, opts, c, round, scenarios)
			if err != nil {
				log.Printf("  %s failed: %v", c.ID, err)
				failed[c.ID] = err.Error()
				doc.Notes = append(doc.Notes, fmt.Sprintf("%s (round %d): %v", c.Name, round, err))
				continue
			}
			doc.Runs = append(doc.Runs, runs...)
			if race != nil {
				doc.Races = append(doc.Races, *race)
			}
		}
	}
	// Leave the shared servers as they were found, near enough: the
	// records of a run are hundreds of thousands of keys.
	for _, c := range cs {
		_ = emptyStore(context.WithoutCancel(ctx), opts.Setup, c)
	}
	for _, c := range cs {
		rc := c.Contender
		if why, ok := failed[c.ID]; ok {
			rc.Skipped = why
		}
		doc.Contenders = append(doc.Contenders, rc)
	}
	return nil
}

// workDir returns a fresh directory for one contender's round.
func workDir(base, id string, round int) (string, error) {
	return freshDir(filepath.Join(base, fmt.Sprintf("%s-r%d", id, round)))
}

// freshDir empties dir, or creates it.
func freshDir(dir string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o755)
}
