package footprint

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"github.com/idem-dev/idem/bench/internal/results"
)

// ChurnCommand is the file store's own churn measurement (TestChurnRatios
// in store/file, which reads the log's size and live bytes from inside):
// new keys written for four TTLs at each of several TTLs, Cleanup every
// second.
const ChurnCommand = "IDEM_FILE_CHURN=1 go test -count=1 -run '^TestChurnRatios$' -v ./store/file"

// churnLine is TestChurnRatios's line for one TTL.
// "Cleanup false, " marks a run with no Cleanup (the log's rotation alone).
var churnLine = regexp.MustCompile(`(?:Cleanup (true|false), )?TTL (\S+): (\d+) pairs .*log/live at most ([0-9.]+) after a Cleanup(?: \(or a sample\))?, ([0-9.]+) before`)

// Churn runs ChurnCommand in the repository root and adds its figures to
// doc.
func Churn(ctx context.Context, root string, doc *results.Doc) error {
	log.Printf("churn: %s", ChurnCommand)
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^TestChurnRatios$", "-v", "./store/file")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "IDEM_FILE_CHURN=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", ChurnCommand, err, out)
	}
	cs := parseChurn(string(out))
	if len(cs) == 0 {
		return fmt.Errorf("%s printed no ratio:\n%s", ChurnCommand, out)
	}
	for _, c := range cs {
		log.Printf("churn: TTL %s: %d pairs, log/live at most %.2f after a Cleanup, %.2f before", c.TTL, c.Pairs, c.After, c.Before)
	}
	doc.Churn = append(doc.Churn, cs...)
	return nil
}

func parseChurn(out string) []results.Churn {
	var cs []results.Churn
	for _, l := range strings.Split(out, "\n") {
		m := churnLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		pairs, _ := strconv.ParseInt(m[3], 10, 64)
		after, _ := strconv.ParseFloat(m[4], 64)
		before, _ := strconv.ParseFloat(m[5], 64)
		cleanup := "every second"
		if m[1] == "false" {
			cleanup = "none"
		}
		cs = append(cs, results.Churn{TTL: m[2], Cleanup: cleanup, Pairs: pairs, After: after, Before: before, Command: ChurnCommand})
	}
	return cs
}
