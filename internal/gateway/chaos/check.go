package chaos

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The kinds of Violation Check finds.
const (
	// ViolationReRun: a key ran again although its holder was neither
	// dead nor expired and no policy released it.
	ViolationReRun = "unexplained re-run"
	// ViolationChanged: a client was told an outcome (a 2xx), and the key
	// was later answered with another status or body.
	ViolationChanged = "acknowledged outcome changed"
	// ViolationPhantom: a client was told an outcome that no execution of
	// the key produced.
	ViolationPhantom = "acknowledgement without execution"
)

// Violation is a broken promise found in a history.
type Violation struct {
	Kind   string
	Key    string
	At     time.Time
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s: key %s: %s", v.Kind, v.Key, v.Detail) }

// Why a key ran again, when it may.
const (
	explainedKill     = "holder killed"
	explainedPause    = "holder paused past its lease"
	explainedStall    = "holder stalled past its lease"
	explainedStale    = "stale holder resumed after its lease"
	explainedReleased = "released by policy"
)

// Report is what Check found: the run's figures and its violations.
type Report struct {
	Keys         int // keys the clients sent
	Attempts     int
	Acknowledged int // keys that some client saw a 2xx for
	Executions   int
	Faults       map[string]int // upstream faults injected, by kind
	Statuses     map[string]int // client answers: "201", "409 in_progress", "error"...
	Kills        int
	Pauses       int
	Stalls       int // stalls the watchdog saw, not caused by a nemesis

	// ReRuns counts executions after a key's first; Explained says why
	// those that may happen did (holder killed, paused past its lease,
	// released by policy).
	ReRuns    int
	Explained map[string]int
	// Unexplained counts the re-runs that are violations by what the run
	// before them ended with: "after slow", "after reset", "after cut",
	// "after an answer", or "request sent twice" (the gateway itself sent
	// one client request upstream again).
	Unexplained map[string]int

	// Blocked holds, for each key whose holder was killed while a client
	// waited on it, the time from the kill to the key's first 2xx after
	// it. StillBlocked counts those keys that got none before the run
	// ended (nor outcome_unknown).
	Blocked      []time.Duration
	StillBlocked int
	// BlockedUnknown counts those keys that ended in outcome_unknown
	// instead (their call's answer was lost before the kill).
	BlockedUnknown int

	// Unknown counts keys whose last answer was 409 outcome_unknown (kept
	// by policy, waiting for an operator or their TTL); Unresolved counts
	// keys with neither a 2xx nor such an answer.
	Unknown    int
	Unresolved int

	Violations []Violation
}

// Check judges h. It needs the attempts to carry the request IDs that the
// upstream logged, to know which gateway ran each execution.
func Check(h History) Report {
	if h.RenewSlack == 0 {
		h.RenewSlack = h.Lease / 2
	}
	if h.Released == nil {
		h.Released = func(status int) bool { return !(status >= 200 && status < 300 || status == 409) }
	}
	r := Report{
		Faults:      map[string]int{},
		Statuses:    map[string]int{},
		Explained:   map[string]int{},
		Unexplained: map[string]int{},
	}
	byID := map[string]*Attempt{}
	attempts := map[string][]*Attempt{}
	for i := range h.Attempts {
		a := &h.Attempts[i]
		byID[a.RequestID] = a
		attempts[a.Key] = append(attempts[a.Key], a)
		r.Attempts++
		r.Statuses[statusName(*a)]++
	}
	execs := map[string][]*Execution{}
	for i := range h.Executions {
		e := &h.Executions[i]
		execs[e.Key] = append(execs[e.Key], e)
		r.Executions++
		if e.Fault != "" {
			r.Faults[e.Fault]++
		}
	}
	events := map[string][]Event{}
	for _, ev := range h.Events {
		events[ev.Gateway] = append(events[ev.Gateway], ev)
		switch ev.Kind {
		case EventKill:
			r.Kills++
		case EventPause:
			r.Pauses++
		case EventStall:
			r.Stalls++
		}
	}
	keys := make([]string, 0, len(attempts))
	for k := range attempts {
		keys = append(keys, k)
	}
	for k := range execs {
		if attempts[k] == nil {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	r.Keys = len(keys)
	c := checker{h: h, byID: byID, events: events, r: &r}
	for _, k := range keys {
		as, es := attempts[k], execs[k]
		sort.SliceStable(as, func(i, j int) bool { return as[i].Sent.Before(as[j].Sent) })
		sort.SliceStable(es, func(i, j int) bool { return es[i].Start.Before(es[j].Start) })
		c.reRuns(k, es)
		c.answers(k, as, es)
	}
	c.blocked(attempts)
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].At.Before(r.Violations[j].At) })
	return r
}

type checker struct {
	h      History
	byID   map[string]*Attempt
	events map[string][]Event
	r      *Report
}

func (c *checker) violate(kind, key string, at time.Time, format string, args ...any) {
	c.r.Violations = append(c.r.Violations, Violation{Kind: kind, Key: key, At: at, Detail: fmt.Sprintf(format, args...)})
}

// reRuns checks every execution of a key after its first: the key's holder
// before it must be dead or expired, or a policy must have released it.
func (c *checker) reRuns(key string, es []*Execution) {
	stale := make([]bool, len(es))
	for i := 1; i < len(es); i++ {
		e := es[i]
		c.r.ReRuns++
		j := i - 1
		for j > 0 && stale[j] {
			j--
		}
		// A holder that lost its lease while paused, before it sent its
		// call, runs it late; its run never owned the record, so it
		// explains nothing after it either.
		if c.staleHolder(e, es[j]) {
			stale[i] = true
			c.r.Explained[explainedStale]++
			continue
		}
		if why := c.explain(es[j], e); why != "" {
			c.r.Explained[why]++
			continue
		}
		prev := es[j]
		if prev.RequestID == e.RequestID {
			c.r.Unexplained["request sent twice"]++
			c.violate(ViolationReRun, key, e.Start,
				"one client request (%s via %s) ran twice upstream: after execution %d ended with fault %q, the gateway sent it again",
				e.RequestID, c.gateway(e), j+1, prev.Fault)
			continue
		}
		if prev.Fault != "" {
			c.r.Unexplained["after "+prev.Fault]++
		} else {
			c.r.Unexplained["after an answer"]++
		}
		c.violate(ViolationReRun, key, e.Start,
			"execution %d (request %s via %s, fault %q) ran while the holder of execution %d (request %s via %s, fault %q, delivered %v) was neither killed nor paused past its %v lease and on_unknown is %s",
			i+1, e.RequestID, c.gateway(e), e.Fault, j+1, prev.RequestID, c.gateway(prev), prev.Fault, prev.Delivered, c.h.Lease, c.onUnknown())
	}
}

func (c *checker) onUnknown() string {
	if c.h.OnUnknown == "" {
		return OnUnknownConflict
	}
	return c.h.OnUnknown
}

func (c *checker) gateway(e *Execution) string {
	if a := c.byID[e.RequestID]; a != nil {
		return a.Gateway
	}
	return "an unknown gateway"
}

// explain says why e may run after prev, or "" when nothing explains it.
func (c *checker) explain(prev, e *Execution) string {
	if !prev.Delivered && c.onUnknown() == OnUnknownRelease {
		return explainedReleased
	}
	if prev.Delivered && c.h.Released(prev.Status) {
		return explainedReleased
	}
	a := c.byID[prev.RequestID]
	if a == nil {
		return "" // no client sent it: nothing is known of its holder
	}
	for _, ev := range c.events[a.Gateway] {
		switch ev.Kind {
		case EventKill:
			// Killed while it held the key, before the re-run.
			if !ev.Start.Before(a.Sent) && !ev.Start.After(e.Start) {
				return explainedKill
			}
		case EventPause, EventStall:
			// It held the key during the pause: it took the request before
			// the pause began, or its call reached the upstream while it was
			// paused; and the pause began before it could have recorded the
			// outcome (at most RenewSlack after the upstream answered).
			held := a.Sent.Before(ev.Start) || !prev.Start.After(ev.End)
			if !held || ev.Start.After(prev.End.Add(c.h.RenewSlack)) {
				continue
			}
			// Paused long enough for its lease to run out, and the re-run
			// came after that.
			expiry := later(a.Sent, ev.Start).Add(c.h.Lease - c.h.RenewSlack)
			if !ev.End.Before(expiry) && !e.Start.Before(expiry) {
				if ev.Kind == EventStall {
					return explainedStall
				}
				return explainedPause
			}
		}
	}
	return ""
}

// staleHolder reports whether e's own gateway took the key, was then paused
// past its lease while prev's gateway took the key over (prev started
// during the pause), and sent e once it was continued.
func (c *checker) staleHolder(e, prev *Execution) bool {
	a := c.byID[e.RequestID]
	if a == nil {
		return false
	}
	for _, ev := range c.events[a.Gateway] {
		if (ev.Kind == EventPause || ev.Kind == EventStall) && a.Sent.Before(ev.Start) && !prev.Start.Before(ev.Start) &&
			ev.End.Sub(ev.Start) >= c.h.Lease-c.h.RenewSlack && !e.Start.Before(ev.End) {
			return true
		}
	}
	return false
}

// answers checks what the clients were told about one key: every 2xx comes
// from an execution, and once a client saw one, every answer is that one.
func (c *checker) answers(key string, as []*Attempt, es []*Execution) {
	if len(as) == 0 {
		c.r.Unresolved++ // runs no client asked for: nothing was answered
		return
	}
	var first *Attempt
	for _, a := range as {
		if a.Acknowledged() && (first == nil || a.Received.Before(first.Received)) {
			first = a
		}
	}
	last := as[len(as)-1]
	switch {
	case first != nil:
		c.r.Acknowledged++
	case last.Problem == "outcome_unknown":
		c.r.Unknown++
	default:
		c.r.Unresolved++
	}
	for _, a := range as {
		if !a.Acknowledged() {
			continue
		}
		if !slices.ContainsFunc(es, func(e *Execution) bool {
			return e.Status == a.Status && bytes.Equal(e.Body, a.Body) && !e.Start.After(a.Received)
		}) {
			c.violate(ViolationPhantom, key, a.Received,
				"%s via %s (request %s) got %d %q, which none of the key's %d executions answered",
				a.Client, a.Gateway, a.RequestID, a.Status, clip(a.Body), len(es))
		}
	}
	if first == nil {
		return
	}
	// One violation per key, naming the first answer that differed.
	var changed []*Attempt
	for _, a := range as {
		if a == first || !a.Answered() {
			continue
		}
		// Two clients told different outcomes is a violation whatever the
		// order; any other answer counts once the first 2xx was out.
		if !a.Acknowledged() && !a.Sent.After(first.Received) {
			continue
		}
		if a.Status != first.Status || !bytes.Equal(a.Body, first.Body) {
			changed = append(changed, a)
		}
	}
	if len(changed) > 0 {
		a := changed[0]
		c.violate(ViolationChanged, key, a.Received,
			"%s via %s (request %s) saw %d %q; later %s via %s (request %s) got %s %q (%d of the key's answers differ)",
			first.Client, first.Gateway, first.RequestID, first.Status, clip(first.Body),
			a.Client, a.Gateway, a.RequestID, statusName(*a), clip(a.Body), len(changed))
	}
}

// blocked measures, for every kill, how long the keys its gateway held (a
// client was waiting on it) stayed without a 2xx.
func (c *checker) blocked(attempts map[string][]*Attempt) {
	for _, ev := range c.h.Events {
		if ev.Kind != EventKill {
			continue
		}
		held := map[string]bool{}
		for _, a := range c.h.Attempts {
			if a.Gateway == ev.Gateway && !a.Sent.After(ev.Start) && !a.Received.Before(ev.Start) && a.Status == 0 {
				held[a.Key] = true
			}
		}
		for key := range held {
			var after time.Duration = -1
			for _, a := range attempts[key] {
				if a.Acknowledged() && a.Received.After(ev.Start) && (after < 0 || a.Received.Sub(ev.Start) < after) {
					after = a.Received.Sub(ev.Start)
				}
			}
			as := attempts[key]
			switch {
			case after >= 0:
				c.r.Blocked = append(c.r.Blocked, after)
			case len(as) > 0 && as[len(as)-1].Problem == "outcome_unknown":
				c.r.BlockedUnknown++
			default:
				c.r.StillBlocked++
			}
		}
	}
	slices.Sort(c.r.Blocked)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func statusName(a Attempt) string {
	switch {
	case a.Status == 0:
		return "error"
	case a.Problem != "":
		return fmt.Sprintf("%d %s", a.Status, a.Problem)
	case a.Replayed:
		return fmt.Sprintf("%d replayed", a.Status)
	}
	return fmt.Sprint(a.Status)
}

func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// String is the report as the test log shows it.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "keys %d (acknowledged %d, outcome_unknown %d, unresolved %d), attempts %d, executions %d\n",
		r.Keys, r.Acknowledged, r.Unknown, r.Unresolved, r.Attempts, r.Executions)
	fmt.Fprintf(&b, "upstream faults %v; answers %v\n", sortedMap(r.Faults), sortedMap(r.Statuses))
	fmt.Fprintf(&b, "kills %d, pauses %d, stalls seen by the watchdog %d; re-runs %d, explained %v, unexplained %v\n",
		r.Kills, r.Pauses, r.Stalls, r.ReRuns, sortedMap(r.Explained), sortedMap(r.Unexplained))
	if n := len(r.Blocked); n > 0 {
		fmt.Fprintf(&b, "blocked after a kill: %d keys, median %v, max %v; ended outcome_unknown %d, still blocked at the end %d\n",
			n, r.Blocked[n/2].Round(time.Millisecond), r.Blocked[n-1].Round(time.Millisecond), r.BlockedUnknown, r.StillBlocked)
	} else {
		fmt.Fprintf(&b, "blocked after a kill: no key; ended outcome_unknown %d, still blocked at the end %d\n", r.BlockedUnknown, r.StillBlocked)
	}
	byKind := map[string]int{}
	for _, v := range r.Violations {
		byKind[v.Kind]++
	}
	fmt.Fprintf(&b, "violations %d %v", len(r.Violations), sortedMap(byKind))
	return b.String()
}

func sortedMap(m map[string]int) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
