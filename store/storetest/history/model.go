package history

import (
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-dev/idem/store"
)

// kind names a store operation.
type kind string

const (
	opReserve  kind = "reserve"
	opGet      kind = "get"
	opRenew    kind = "renew"
	opComplete kind = "complete"
	opRelease  kind = "release"
	// opCrash is a kill -9 and the restart after it, on every key at
	// once: a reservation that returned before its sync (input.Unsynced)
	// and that no later write of its key synced may be lost to it.
	opCrash kind = "crash"
)

// never is the return time of an operation whose outcome is unknown and
// that may take effect at any time after its call.
const never = math.MaxInt64

// input is an operation as its client sent it, with the times it was
// called and returned (nanoseconds on the history's clock; Return is
// never when its outcome is unknown). The model needs the times for the
// lease rule: a lease cannot be over before it has run.
type input struct {
	Kind  kind   `json:"kind"`
	Key   string `json:"key"`
	Slot  int    `json:"slot"` // the workload's slot and generation Key is of
	Gen   int64  `json:"gen"`
	Token uint64 `json:"token"`
	// Match is what a takeover must find equal in the stale record: its
	// fingerprint and binding. Ident is everything the reservation wrote
	// that a read must give back (Match, request ID, key, scope, key hash).
	Match    string `json:"match,omitempty"`
	Ident    string `json:"ident,omitempty"`
	TakeOver bool   `json:"takeover,omitempty"`
	// Unsynced: the store may return this Reserve before its record is
	// on disk (an embedded store's OneSync, for a reservation that may be
	// taken over), so that a crash may lose it.
	Unsynced bool        `json:"unsynced,omitempty"`
	Lease    int64       `json:"lease,omitempty"` // Reserve's and Renew's, in ns
	State    store.State `json:"state,omitempty"` // Complete's
	Value    string      `json:"value,omitempty"` // Complete's
	Call     int64       `json:"call"`
	Return   int64       `json:"return"`
}

// outcome is how a call ended: its answer, or "unknown" for any error
// that does not say whether it took effect.
type outcome string

const (
	outOK        outcome = "ok"
	outLeaseLost outcome = "lease_lost"
	outNotFound  outcome = "not_found"
	outUnknown   outcome = "unknown" // any other error: maybe applied
)

// view is what a read (Get, a refused Reserve's Existing) reported of a
// record.
type view struct {
	State store.State `json:"state"`
	Token uint64      `json:"token"`
	Ident string      `json:"ident"`
	Value string      `json:"value,omitempty"`
	Stale bool        `json:"stale,omitempty"`
}

// output is an operation's answer.
type output struct {
	Outcome  outcome `json:"outcome"`
	Acquired bool    `json:"acquired,omitempty"`
	TookOver bool    `json:"took_over,omitempty"`
	Record   *view   `json:"record,omitempty"` // Get's record, a refused Reserve's Existing
	Err      string  `json:"err,omitempty"`    // for the visualization
}

// record is the model's state of one key. The zero value is an absent key.
type record struct {
	keyState
	// Unsynced: the record is a reservation that a crash may still lose,
	// and Durable is what the key then holds. A store that returns a
	// reservation before its sync writes its log in order: a write of
	// the key synced after it syncs it too, and a crash keeps a prefix
	// of the log, so the key falls back to the last state that was on
	// disk, which Durable tracks.
	Unsynced bool
	Durable  keyState
}

// keyState is what a key holds: the part of record that a crash keeps.
type keyState struct {
	Present bool
	State   store.State
	Token   uint64
	Match   string
	Ident   string
	Value   string
	// LeaseFrom is the earliest instant the lease can end: the call time of
	// the operation that last set it plus its duration. The store's clock
	// reads no earlier than the call when it sets the lease, and a clock
	// runs no faster than ours.
	LeaseFrom int64
}

// synced is r once a write of its key has been synced: a crash keeps it.
func (r record) synced() record {
	r.Unsynced, r.Durable = false, keyState{}
	return r
}

// unsynced returns the states a reservation mine that returned before
// its sync can leave, made on a key in state s: a crash falls back to s
// if s is on disk, and otherwise to s or to what s would fall back to,
// depending on whether a sync (of any key) wrote s's frame before mine
// was appended.
func unsynced(s, mine record) []record {
	mine.Unsynced, mine.Durable = true, s.keyState
	if !s.Unsynced {
		return []record{mine}
	}
	older := mine
	older.Durable = s.Durable
	return []record{mine, older}
}

func (r record) holds(token uint64) bool {
	return r.Present && r.State == store.InProgress && r.Token == token
}

// shows reports whether v reports r, and whether a stale report is
// possible by the time ret: a lease is never judged over before it ran.
func (r record) shows(v *view, ret int64, slack int64) bool {
	if v == nil || !r.Present || v.State != r.State || v.Token != r.Token || v.Ident != r.Ident || v.Value != r.Value {
		return false
	}
	return !v.Stale || r.State == store.InProgress && canEnd(r.LeaseFrom, ret, slack)
}

// canEnd reports whether a lease that ends no earlier than from can be
// judged over by an operation that returned at ret.
func canEnd(from, ret, slack int64) bool { return ret == never || ret >= from-slack }

// step returns the states a key in state s can be in after op in with
// answer out: none when the answer is impossible. An answer that is
// unknown allows every outcome, including none at all.
func step(s record, in input, out output, slack int64) []record {
	unknown := out.Outcome == outUnknown
	switch in.Kind {
	case opGet:
		switch {
		case unknown,
			out.Outcome == outNotFound && !s.Present,
			out.Outcome == outOK && s.shows(out.Record, in.Return, slack):
			return []record{s}
		}
		return nil

	case opCrash:
		if s.Unsynced {
			return []record{s.synced(), {keyState: s.Durable}}
		}
		return []record{s}

	case opReserve:
		mine := record{keyState: keyState{Present: true, State: store.InProgress, Token: in.Token,
			Match: in.Match, Ident: in.Ident, LeaseFrom: in.Call + in.Lease}}
		takeover := s.Present && s.State == store.InProgress && in.TakeOver && s.Match == in.Match &&
			canEnd(s.LeaseFrom, in.Return, slack)
		acquired := []record{mine}
		if in.Unsynced {
			acquired = unsynced(s, mine)
		}
		switch {
		case unknown:
			if !s.Present || takeover {
				return append([]record{s}, acquired...)
			}
			return []record{s}
		case out.Outcome != outOK:
			return nil
		case out.Acquired && !s.Present && !out.TookOver,
			out.Acquired && takeover && out.TookOver:
			return acquired
		case !out.Acquired && s.shows(out.Record, in.Return, slack):
			return []record{s}
		}
		return nil

	case opRenew:
		renewed := s.synced()
		renewed.LeaseFrom = in.Call + in.Lease
		switch {
		case unknown && s.holds(in.Token):
			return []record{s, renewed}
		case unknown:
			return []record{s}
		case out.Outcome == outOK && s.holds(in.Token):
			return []record{renewed}
		case out.Outcome == outLeaseLost && !s.holds(in.Token):
			return []record{s}
		}
		return nil

	case opComplete:
		done := s.synced()
		done.State, done.Value, done.LeaseFrom = in.State, in.Value, 0
		switch {
		case unknown && s.holds(in.Token):
			return []record{s, done}
		case unknown:
			return []record{s}
		case out.Outcome == outOK && s.holds(in.Token):
			return []record{done}
		case out.Outcome == outOK && s.Present && s.Token == in.Token && s.State == in.State && s.Value == in.Value:
			// The same completion again, by the holder whose first
			// reply was lost: a store may recognise it (S3 does) and
			// answer it as it answered the first.
			return []record{s}
		case out.Outcome == outLeaseLost && !s.holds(in.Token):
			return []record{s}
		}
		return nil

	case opRelease:
		// The in_progress or failed record of the token; never a
		// succeeded one.
		releasable := s.Present && s.Token == in.Token && s.State != store.Succeeded
		switch {
		case unknown && releasable:
			return []record{s, {}}
		case unknown:
			return []record{s}
		case out.Outcome == outOK && releasable:
			return []record{{}}
		case out.Outcome == outLeaseLost && !releasable:
			return []record{s}
		}
		return nil
	}
	return nil
}

// model is the state machine of store/doc.go for porcupine, one key per
// partition. slack is how much earlier than our clock says a store's clock
// may judge a lease over: the rounding of the times it keeps.
func model(slack time.Duration) porcupine.Model {
	sl := int64(slack)
	nm := porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []any { return []any{record{}} },
		Step: func(state, in, out any) []any {
			next := step(state.(record), in.(input), out.(output), sl)
			states := make([]any, len(next))
			for i, r := range next {
				states[i] = r
			}
			return states
		},
		Hash: func(state any) uint64 {
			r := state.(record)
			h := fnv.New64a()
			fmt.Fprint(h, r.Present, r.State, r.Token, r.Value, r.LeaseFrom, r.Unsynced, r.Durable.Token)
			return h.Sum64()
		},
		DescribeOperation: describe,
		DescribeState: func(state any) string {
			r := state.(record)
			if !r.Present {
				return "absent"
			}
			d := fmt.Sprintf("%s(%x) %q lease from %v", r.State, r.Token, r.Value, time.Duration(r.LeaseFrom))
			if r.Unsynced {
				d += fmt.Sprintf(", not yet synced over %s(%x)", r.Durable.State, r.Durable.Token)
			}
			return d
		},
	}
	return nm.ToModel()
}

// partition splits a history by key: keys are independent, and each
// partition is checked on its own. A crash (no key) is in every one.
func partition(ops []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string]int{}
	var parts [][]porcupine.Operation
	var crashes []porcupine.Operation
	for _, op := range ops {
		k := op.Input.(input).Key
		if op.Input.(input).Kind == opCrash {
			crashes = append(crashes, op)
			continue
		}
		i, ok := byKey[k]
		if !ok {
			i = len(parts)
			byKey[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	for i := range parts {
		parts[i] = append(parts[i], crashes...)
	}
	return parts
}

func describe(in, out any) string {
	// porcupine's drawing also asks about the states between operations,
	// which have no input or output.
	i, iok := in.(input)
	o, ook := out.(output)
	if !iok || !ook {
		return ""
	}
	var call string
	switch i.Kind {
	case opReserve:
		call = fmt.Sprintf("reserve(%x, takeover %v, lease %v)", i.Token, i.TakeOver, time.Duration(i.Lease))
	case opGet:
		call = "get()"
	case opRenew:
		call = fmt.Sprintf("renew(%x, %v)", i.Token, time.Duration(i.Lease))
	case opComplete:
		call = fmt.Sprintf("complete(%x, %s, %q)", i.Token, i.State, i.Value)
	case opRelease:
		call = fmt.Sprintf("release(%x)", i.Token)
	case opCrash:
		return "kill -9, restart"
	}
	res := string(o.Outcome)
	switch {
	case o.Outcome == outUnknown:
		res += " (" + o.Err + ")"
	case o.Acquired && o.TookOver:
		res = "took over"
	case o.Acquired:
		res = "acquired"
	}
	if v := o.Record; v != nil {
		res += fmt.Sprintf(" %s(%x) %q", v.State, v.Token, v.Value)
		if v.Stale {
			res += " stale"
		}
	}
	return call + " -> " + res
}
