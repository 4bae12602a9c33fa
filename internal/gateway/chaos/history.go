package chaos

import (
	"sort"
	"sync"
	"time"
)

// Attempt is one request a client sent: the client's side of the history.
type Attempt struct {
	Key       string
	RequestID string // X-Request-Id, unique per attempt; the upstream logs it
	Client    string // which client (e.g. "k12/patient")
	Gateway   string // the gateway process it went to, one name per incarnation
	Sent      time.Time
	Received  time.Time // when the answer, or the error, came back
	// Status is the HTTP status, 0 when no complete answer came back
	// (connection refused or reset, timeout, body cut short).
	Status int
	Body   []byte
	// Problem is the problem+json kind of an answer idem made itself
	// (conflict_type, or the last part of type): "in_progress",
	// "outcome_unknown", "upstream_timeout"...; empty otherwise.
	Problem  string
	Replayed bool   // Idempotent-Replayed: true
	Err      string // the transport error, when Status is 0
}

// Acknowledged reports whether the client was told an outcome: a 2xx.
// 504 upstream_timeout and 409 outcome_unknown say the call may have run,
// not what it answered: they are not acknowledgements.
func (a Attempt) Acknowledged() bool { return a.Status >= 200 && a.Status < 300 }

// Answered reports whether the gateway answered about the key's outcome at
// all. A transport error is no answer, and neither is a 503: the gateway
// says it cannot tell now (store unavailable, outcome not recorded) and the
// client should retry.
func (a Attempt) Answered() bool { return a.Status != 0 && a.Status != 503 }

// Execution is one run of the operation behind a key, as the upstream saw
// it: the ground truth of how many times a key ran.
type Execution struct {
	Key       string
	RequestID string // the X-Request-Id the gateway forwarded
	Token     string // the Idempotency-Token the gateway forwarded, if any
	Start     time.Time
	End       time.Time
	// Status and Body are what the upstream meant to answer; for a cut
	// response Body is the whole body of which only part was sent.
	Status int
	Body   []byte
	// Fault is the fault the upstream injected: "" (none), "slow" (past
	// upstream_timeout), "reset" (connection reset, no answer), "cut"
	// (Content-Length announced, half the body sent, connection dropped).
	Fault string
	// Delivered: the whole answer was written to the gateway's connection.
	Delivered bool
}

// Event is something a nemesis did to a gateway process, or a stall the
// watchdog saw.
type Event struct {
	Kind    string // EventKill, EventPause or EventStall
	Gateway string // the process incarnation it hit
	Start   time.Time
	// End is when a paused process was continued (SIGCONT), or when a
	// killed one's replacement was started.
	End time.Time
}

// The nemeses' events, and the watchdog's.
const (
	EventKill  = "kill"
	EventPause = "pause"
	// EventStall: the gateway did not answer its health probe for a while
	// though no nemesis paused it: the machine did (CPU starvation, a long
	// GC). Like a pause, it may cost the gateway its leases; the checker
	// treats it as one, and the report counts it apart.
	EventStall = "stall"
)

// The policies a route may have for an outcome that is unknown (the call was
// sent but no complete answer came back).
const (
	OnUnknownConflict = "conflict" // the key stays taken: at most once (the default)
	OnUnknownRelease  = "release"  // the key is released: at least once
)

// History is everything recorded in one run, and the settings the checker
// needs to judge it.
type History struct {
	// Lease is the gateways' lease: a holder paused for longer than this
	// may lose its key.
	Lease time.Duration
	// RenewSlack is how much earlier than a full lease after its last
	// sign of life a holder's lease may run out (the engine renews every
	// third of a lease). Zero means Lease/2.
	RenewSlack time.Duration
	// OnUnknown is the routes' policy for unknown outcomes; empty means
	// OnUnknownConflict.
	OnUnknown string
	// Released reports whether the routes release a key whose call was
	// answered with status (on_failure: release). Nil means the default
	// policy: 2xx and 409 are recorded, anything else releases the key.
	Released func(status int) bool `json:"-"`

	Attempts   []Attempt
	Executions []Execution
	Events     []Event
}

// Recorder collects a History from many goroutines.
type Recorder struct {
	mu sync.Mutex // guards h
	h  History
}

// NewRecorder returns a recorder for a run whose gateways have lease and
// policy onUnknown.
func NewRecorder(lease time.Duration, onUnknown string) *Recorder {
	return &Recorder{h: History{Lease: lease, OnUnknown: onUnknown}}
}

// Attempt records a client's attempt once its answer (or error) is in.
func (r *Recorder) Attempt(a Attempt) {
	r.mu.Lock()
	r.h.Attempts = append(r.h.Attempts, a)
	r.mu.Unlock()
}

// Execution records a run of the operation once the upstream is done with it.
func (r *Recorder) Execution(e Execution) {
	r.mu.Lock()
	r.h.Executions = append(r.h.Executions, e)
	r.mu.Unlock()
}

// Event records what a nemesis did, once it is over.
func (r *Recorder) Event(e Event) {
	r.mu.Lock()
	r.h.Events = append(r.h.Events, e)
	r.mu.Unlock()
}

// History returns a copy of what was recorded so far, each list in time
// order.
func (r *Recorder) History() History {
	r.mu.Lock()
	h := r.h
	h.Attempts = append([]Attempt(nil), r.h.Attempts...)
	h.Executions = append([]Execution(nil), r.h.Executions...)
	h.Events = append([]Event(nil), r.h.Events...)
	r.mu.Unlock()
	sort.SliceStable(h.Attempts, func(i, j int) bool { return h.Attempts[i].Sent.Before(h.Attempts[j].Sent) })
	sort.SliceStable(h.Executions, func(i, j int) bool { return h.Executions[i].Start.Before(h.Executions[j].Start) })
	sort.SliceStable(h.Events, func(i, j int) bool { return h.Events[i].Start.Before(h.Events[j].Start) })
	return h
}
