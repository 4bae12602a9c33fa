package chaos

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// t0 is the start of every hand-made history; at gives a time after it.
var t0 = time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func charge(id string) []byte { return []byte(`{"id":"` + id + `","amount":100}`) }

// attempt is a client's attempt on key "k" that ends with status and body
// ("" and 0: a transport error).
func attempt(id, gateway string, sent, received, status int, body []byte, problem string) Attempt {
	a := Attempt{Key: "k", RequestID: id, Client: "client-" + id, Gateway: gateway,
		Sent: at(sent), Received: at(received), Status: status, Body: body, Problem: problem}
	if status == 0 {
		a.Err = "connection reset"
	}
	return a
}

func execution(id string, start, end int, body []byte, fault string) Execution {
	return Execution{Key: "k", RequestID: id, Start: at(start), End: at(end), Status: 201, Body: body,
		Fault: fault, Delivered: fault == "" || fault == "delivered-late"}
}

// killed is a history in which gateway holder runs r1 (its execution
// ending with fault) and gateway victim is killed from start to end (in
// ms); r2 runs again on g2 after r1's lease.
func killed(holder, fault, victim string, start, end int) History {
	a, b := charge("ch_a"), charge("ch_b")
	return History{
		Attempts: []Attempt{
			attempt("r1", holder, 0, 100, 0, nil, ""),
			attempt("r2", "g2", 1200, 1400, 201, b, ""),
		},
		Executions: []Execution{
			execution("r1", 10, 300, a, fault),
			execution("r2", 1250, 1350, b, ""),
		},
		Events: []Event{{Kind: EventKill, Gateway: victim, Start: at(start), End: at(end)}},
	}
}

// cut is a history in which r1's response is cut mid-body and a retry,
// r2, runs again, under onUnknown.
func cut(onUnknown string) History {
	a, b := charge("ch_a"), charge("ch_b")
	return History{
		OnUnknown: onUnknown,
		Attempts: []Attempt{
			attempt("r1", "g1", 0, 100, 0, nil, ""),
			attempt("r2", "g1", 150, 300, 201, b, ""),
		},
		Executions: []Execution{
			execution("r1", 10, 90, a, "cut"),
			execution("r2", 160, 250, b, ""),
		},
	}
}

func kinds(r Report) string {
	var ks []string
	for _, v := range r.Violations {
		ks = append(ks, v.Kind)
	}
	return strings.Join(ks, ", ")
}

func TestCheck(t *testing.T) {
	a, b := charge("ch_a"), charge("ch_b")
	tests := []struct {
		name      string
		h         History
		want      string // violation kinds, in time order
		explained string // a key of Report.Explained that must be 1
	}{
		{
			name: "the payments API answers once and every retry replays",
			h: History{
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 100, 201, a, ""),
					attempt("r2", "g2", 50, 60, 409, nil, "in_progress"),
					attempt("r3", "g2", 200, 210, 201, a, ""),
				},
				Executions: []Execution{execution("r1", 10, 90, a, "")},
			},
		},
		{
			name: "an upstream timeout releases the key and the retry runs it again",
			h: History{
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 1000, 504, nil, "upstream_timeout"),
					attempt("r2", "g2", 1100, 1300, 201, b, ""),
				},
				Executions: []Execution{
					execution("r1", 10, 2000, a, "slow"),
					execution("r2", 1150, 1250, b, ""),
				},
			},
			want: ViolationReRun,
		},
		{
			name: "a response cut mid-body, then a retry runs again",
			h:    cut(""),
			want: ViolationReRun,
		},
		{
			name: "the gateway's transport sends one request again after a reset",
			h: History{
				Attempts: []Attempt{attempt("r1", "g1", 0, 400, 201, b, "")},
				Executions: []Execution{
					execution("r1", 10, 100, a, "reset"),
					execution("r1", 101, 300, b, ""),
				},
			},
			want: ViolationReRun,
		},
		{
			name:      "the same cut under on_unknown release is at-least-once on purpose",
			h:         cut(OnUnknownRelease),
			explained: explainedReleased,
		},
		{
			name: "a 500 released by on_failure runs again",
			h: History{
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 100, 500, []byte("boom"), ""),
					attempt("r2", "g1", 150, 300, 201, b, ""),
				},
				Executions: []Execution{
					{Key: "k", RequestID: "r1", Start: at(10), End: at(90), Status: 500, Body: []byte("boom"), Delivered: true},
					execution("r2", 160, 250, b, ""),
				},
			},
			explained: explainedReleased,
		},
		{
			name:      "the holder is killed, the key runs again once its lease ran out",
			h:         killed("g1", "", "g1", 100, 600),
			explained: explainedKill,
		},
		{
			name: "another gateway was killed: it explains nothing",
			h:    killed("g1", "reset", "g3", 100, 600),
			want: ViolationReRun,
		},
		{
			name: "a holder killed before it took the key explains nothing",
			h:    killed("g1#1", "reset", "g1#1", -500, -100),
			want: ViolationReRun,
		},
		{
			name: "a paused holder sends its held response after another gateway took the key over",
			h: History{
				Lease: time.Second,
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 2600, 201, a, ""), // the patient client
					attempt("r2", "g2", 1500, 1600, 201, b, ""),
				},
				Executions: []Execution{
					execution("r1", 10, 300, a, ""),
					execution("r2", 1550, 1580, b, ""),
				},
				Events: []Event{{Kind: EventPause, Gateway: "g1", Start: at(50), End: at(2500)}},
			},
			want:      ViolationChanged,
			explained: explainedPause,
		},
		{
			name: "a holder the machine starved past its lease, seen by the watchdog",
			h: History{
				Lease: time.Second,
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 1300, 504, nil, "upstream_timeout"),
					attempt("r2", "g2", 200, 1600, 201, b, ""),
				},
				Executions: []Execution{
					execution("r1", 10, 300, a, ""),
					execution("r2", 1250, 1580, b, ""),
				},
				Events: []Event{{Kind: EventStall, Gateway: "g1", Start: at(100), End: at(1270)}},
			},
			explained: explainedStall,
		},
		{
			name: "a gateway paused just after it took the key runs it late, and a retry queued behind the pause takes it over",
			h: History{
				Lease: time.Second,
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 2300, 409, nil, "in_progress"),
					attempt("r2", "g1", 10, 2400, 201, b, ""),
				},
				Executions: []Execution{
					execution("r1", 2080, 2200, a, ""),
					execution("r2", 2090, 2300, b, ""),
				},
				Events: []Event{{Kind: EventPause, Gateway: "g1", Start: at(5), End: at(2050)}},
			},
			explained: explainedPause,
		},
		{
			name: "a pause that began after the holder was done explains nothing",
			h: History{
				Lease: time.Second,
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 300, 201, a, ""),
					attempt("r2", "g2", 3000, 3200, 201, b, ""),
				},
				Executions: []Execution{
					execution("r1", 10, 200, a, ""),
					execution("r2", 3050, 3100, b, ""),
				},
				Events: []Event{{Kind: EventPause, Gateway: "g1", Start: at(1000), End: at(2900)}},
			},
			want: ViolationReRun + ", " + ViolationChanged,
		},
		{
			name: "a pause shorter than the lease does not explain a re-run",
			h: History{
				Lease: time.Second,
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 1000, 504, nil, "upstream_timeout"),
					attempt("r2", "g2", 1500, 1600, 201, b, ""),
				},
				Executions: []Execution{
					execution("r1", 10, 1800, a, "slow"),
					execution("r2", 1550, 1580, b, ""),
				},
				Events: []Event{{Kind: EventPause, Gateway: "g1", Start: at(50), End: at(400)}},
			},
			want: ViolationReRun,
		},
		{
			name: "a re-run before the paused holder's lease could run out",
			h: History{
				Lease: time.Second,
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 3000, 0, nil, ""),
					attempt("r2", "g2", 150, 300, 201, b, ""),
				},
				Executions: []Execution{
					execution("r1", 10, 100, a, ""),
					execution("r2", 200, 250, b, ""),
				},
				Events: []Event{{Kind: EventPause, Gateway: "g1", Start: at(50), End: at(2500)}},
			},
			want: ViolationReRun,
		},
		{
			name: "a holder paused before sending runs late, and explains no later run",
			h: History{
				Lease: time.Second,
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 2200, 201, b, ""),
					attempt("r2", "g2", 1200, 1300, 201, b, ""),
					attempt("r3", "g3", 3000, 3100, 201, charge("ch_c"), ""),
				},
				Executions: []Execution{
					execution("r2", 1250, 1280, b, ""),
					execution("r1", 2050, 2100, a, ""),
					execution("r3", 3050, 3080, charge("ch_c"), ""),
				},
				Events: []Event{{Kind: EventPause, Gateway: "g1", Start: at(10), End: at(2000)}},
			},
			want:      ViolationReRun + ", " + ViolationChanged,
			explained: explainedStale,
		},
		{
			name: "a request that reached a gateway while it was paused explains nothing",
			h: History{
				Lease: time.Second,
				Attempts: []Attempt{
					attempt("r1", "g2", 0, 100, 0, nil, ""),
					attempt("r2", "g1", 600, 2700, 201, b, ""),
				},
				Executions: []Execution{
					execution("r1", 10, 90, a, "cut"),
					execution("r2", 2550, 2600, b, ""),
				},
				Events: []Event{{Kind: EventPause, Gateway: "g1", Start: at(500), End: at(2500)}},
			},
			want: ViolationReRun,
		},
		{
			name: "after a 2xx, a later retry gets outcome_unknown",
			h: History{
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 100, 201, a, ""),
					attempt("r2", "g2", 50, 60, 409, nil, "in_progress"), // sent before: fine
					attempt("r3", "g2", 150, 160, 503, nil, "store_unavailable"),
					attempt("r4", "g2", 200, 210, 409, nil, "outcome_unknown"),
				},
				Executions: []Execution{execution("r1", 10, 90, a, "")},
			},
			want: ViolationChanged,
		},
		{
			name: "a replay with another body",
			h: History{
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 100, 201, a, ""),
					attempt("r2", "g2", 200, 210, 201, append(append([]byte{}, a...), ' '), ""),
				},
				Executions: []Execution{execution("r1", 10, 90, a, "")},
			},
			want: ViolationPhantom + ", " + ViolationChanged,
		},
		{
			name: "a replay with another status",
			h: History{
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 100, 201, a, ""),
					attempt("r2", "g2", 200, 210, 200, a, ""),
				},
				Executions: []Execution{execution("r1", 10, 90, a, "")},
			},
			want: ViolationPhantom + ", " + ViolationChanged,
		},
		{
			name: "a 2xx that no execution answered",
			h: History{
				Attempts:   []Attempt{attempt("r1", "g1", 0, 100, 201, a, "")},
				Executions: nil,
			},
			want: ViolationPhantom,
		},
		{
			name: "half a cut body stored and replayed as a success",
			h: History{
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 100, 0, nil, ""),
					attempt("r2", "g1", 200, 210, 201, a[:len(a)/2], ""),
				},
				Executions: []Execution{execution("r1", 10, 90, a, "cut")},
			},
			want: ViolationPhantom,
		},
		{
			name: "an execution no client asked for is not an answer",
			h: History{
				Executions: []Execution{execution("r9", 10, 90, a, "")},
			},
		},
		{
			name: "outcome_unknown on every retry is not an acknowledgement",
			h: History{
				Attempts: []Attempt{
					attempt("r1", "g1", 0, 100, 0, nil, ""),
					attempt("r2", "g1", 200, 210, 409, nil, "outcome_unknown"),
				},
				Executions: []Execution{execution("r1", 10, 90, a, "cut")},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.h)
			if got := kinds(r); got != tc.want {
				t.Errorf("violations %q, want %q\n%v", got, tc.want, r.Violations)
			}
			reRuns := 0
			for _, v := range r.Violations {
				if v.Kind == ViolationReRun {
					reRuns++
				}
			}
			n := 0
			for _, c := range r.Unexplained {
				n += c
			}
			if n != reRuns {
				t.Errorf("unexplained %v, want %d in all", r.Unexplained, reRuns)
			}
			if tc.explained != "" && r.Explained[tc.explained] != 1 {
				t.Errorf("explained %v, want one %q", r.Explained, tc.explained)
			}
			if tc.want == "" && tc.explained == "" && r.ReRuns != 0 {
				t.Errorf("%d re-runs", r.ReRuns)
			}
		})
	}
}

// TestCheckReport: the figures the lead reads: keys, blocked time after a
// kill, keys left in outcome_unknown.
func TestCheckReport(t *testing.T) {
	a, b := charge("ch_a"), charge("ch_b")
	h := History{
		Lease: time.Second,
		Attempts: []Attempt{
			attempt("r1", "g1", 0, 500, 0, nil, ""), // in flight at the kill
			attempt("r2", "g2", 600, 610, 409, nil, "in_progress"),
			attempt("r3", "g2", 1600, 1800, 201, b, ""),
			{Key: "k2", RequestID: "r4", Gateway: "g2", Sent: at(0), Received: at(100), Err: "EOF"},
			{Key: "k2", RequestID: "r5", Gateway: "g2", Sent: at(200), Received: at(210), Status: 409, Problem: "outcome_unknown"},
			{Key: "k3", RequestID: "r6", Gateway: "g1", Sent: at(100), Received: at(500), Err: "EOF"},
		},
		Executions: []Execution{
			execution("r1", 10, 300, a, ""),
			execution("r3", 1650, 1700, b, ""),
			{Key: "k2", RequestID: "r4", Start: at(10), End: at(90), Status: 201, Body: a, Fault: "cut"},
		},
		Events: []Event{{Kind: EventKill, Gateway: "g1", Start: at(500), End: at(900)}},
	}
	r := Check(h)
	if len(r.Violations) != 0 {
		t.Fatalf("violations: %v", r.Violations)
	}
	if r.Keys != 3 || r.Acknowledged != 1 || r.Unknown != 1 || r.Unresolved != 1 || r.Kills != 1 ||
		r.ReRuns != 1 || r.Explained[explainedKill] != 1 || r.Faults["cut"] != 1 {
		t.Errorf("report %+v", r)
	}
	if len(r.Unexplained) != 0 {
		t.Errorf("unexplained %v", r.Unexplained)
	}
	if len(r.Blocked) != 1 || r.Blocked[0] != 1300*time.Millisecond || r.StillBlocked != 1 {
		t.Errorf("blocked %v, still blocked %d; want [1.3s] and 1 (k3)", r.Blocked, r.StillBlocked)
	}
	s := r.String()
	for _, want := range []string{"keys 3 (acknowledged 1, outcome_unknown 1, unresolved 1)", "kills 1, pauses 0, stalls seen by the watchdog 0; re-runs 1", "median 1.3s", "violations 0"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}

// TestRecorder: many clients record at once, and the history comes back in
// time order.
func TestRecorder(t *testing.T) {
	rec := NewRecorder(time.Second, "")
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint(i)
			rec.Attempt(Attempt{Key: id, RequestID: id, Sent: at(50 - i)})
			rec.Execution(Execution{Key: id, RequestID: id, Start: at(50 - i)})
			rec.Event(Event{Kind: EventKill, Start: at(50 - i)})
		}()
	}
	wg.Wait()
	h := rec.History()
	if len(h.Attempts) != 50 || len(h.Executions) != 50 || len(h.Events) != 50 || h.Lease != time.Second {
		t.Fatalf("history %d %d %d", len(h.Attempts), len(h.Executions), len(h.Events))
	}
	for i := 1; i < 50; i++ {
		if h.Attempts[i].Sent.Before(h.Attempts[i-1].Sent) || h.Executions[i].Start.Before(h.Executions[i-1].Start) ||
			h.Events[i].Start.Before(h.Events[i-1].Start) {
			t.Fatalf("not in time order at %d", i)
		}
	}
}
