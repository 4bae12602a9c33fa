package history

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/idem-dev/idem/store"
)

// Hand-made histories of one key, each a behaviour the model must allow or
// refuse. Times are in nanoseconds; leases are 100.
const lease = 100

func reserve(token uint64, match string) input {
	return input{Kind: opReserve, Key: "k", Token: token, Match: match, Ident: match + "/" + string(rune('A'+token)), TakeOver: true, Lease: lease}
}

func fenced(k kind, token uint64) input {
	in := input{Kind: k, Key: "k", Token: token}
	switch k {
	case opRenew:
		in.Lease = lease
	case opComplete:
		in.State, in.Value = store.Succeeded, "v"
	}
	return in
}

var (
	ok        = output{Outcome: outOK}
	acquired  = output{Outcome: outOK, Acquired: true}
	tookOver  = output{Outcome: outOK, Acquired: true, TookOver: true}
	leaseLost = output{Outcome: outLeaseLost}
	notFound  = output{Outcome: outNotFound}
	unknown   = output{Outcome: outUnknown, Err: "timeout"}
	get       = input{Kind: opGet, Key: "k"}
)

// holds is what a read (a Get, a refused Reserve) of token's record in
// state st reports.
func holds(token uint64, match string, st store.State, value string, stale bool) output {
	in := reserve(token, match)
	return output{Outcome: outOK, Record: &view{State: st, Token: token, Ident: in.Ident, Value: value, Stale: stale}}
}

// unsyncedReserve is reserve(token, "a") returned before its sync; crash
// is a kill -9 and restart.
func unsyncedReserve(token uint64) input {
	in := reserve(token, "a")
	in.Unsynced = true
	return in
}

var crash = input{Kind: opCrash}

type timed struct {
	in        input
	out       output
	call, ret int64
}

func TestModel(t *testing.T) {
	t.Parallel()
	completeFailed := fenced(opComplete, 1)
	completeFailed.State, completeFailed.Value = store.Failed, "f"
	renewLong := fenced(opRenew, 1)
	tests := []struct {
		name string
		ops  []timed
		want porcupine.CheckResult
	}{
		{"a record's life", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{get, holds(1, "a", store.InProgress, "", false), 2, 3},
			{fenced(opRenew, 1), ok, 4, 5},
			{fenced(opComplete, 1), ok, 6, 7},
			{get, holds(1, "a", store.Succeeded, "v", false), 8, 9},
			{reserve(2, "a"), holds(1, "a", store.Succeeded, "v", false), 10, 11},
			{fenced(opRelease, 1), leaseLost, 12, 13},
			{fenced(opComplete, 1), leaseLost, 14, 15},
		}, porcupine.Ok},
		{"a reservation returned before its sync, lost to a crash", []timed{
			{unsyncedReserve(1), acquired, 0, 1},
			{crash, ok, 2, 3},
			{get, notFound, 4, 5},
		}, porcupine.Ok},
		{"a synced reservation lost to a crash", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{crash, ok, 2, 3},
			{get, notFound, 4, 5},
		}, porcupine.Illegal},
		{"a completion lost to a crash", []timed{
			{unsyncedReserve(1), acquired, 0, 1},
			{fenced(opComplete, 1), ok, 2, 3},
			{crash, ok, 4, 5},
			{get, holds(1, "a", store.InProgress, "", false), 6, 7},
		}, porcupine.Illegal},
		{"a reservation renewed, then lost to a crash", []timed{
			{unsyncedReserve(1), acquired, 0, 1},
			{fenced(opRenew, 1), ok, 2, 3},
			{crash, ok, 4, 5},
			{get, notFound, 6, 7},
		}, porcupine.Illegal},
		{"a takeover lost to a crash leaves the stale holder", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{unsyncedReserve(2), tookOver, 200, 201},
			{crash, ok, 202, 203},
			{get, holds(1, "a", store.InProgress, "", true), 204, 205},
			{fenced(opComplete, 2), leaseLost, 206, 207},
		}, porcupine.Ok},
		{"two reservations returned before their sync, the second lost", []timed{
			{unsyncedReserve(1), acquired, 0, 1},
			{unsyncedReserve(2), tookOver, 200, 201},
			{crash, ok, 202, 203},
			{get, holds(1, "a", store.InProgress, "", true), 204, 205},
		}, porcupine.Ok},
		{"two reservations returned before their sync, both lost", []timed{
			{unsyncedReserve(1), acquired, 0, 1},
			{unsyncedReserve(2), tookOver, 200, 201},
			{crash, ok, 202, 203},
			{get, notFound, 204, 205},
		}, porcupine.Ok},
		{"a lost token holds the key after the restart", []timed{
			{unsyncedReserve(1), acquired, 0, 1},
			{crash, ok, 2, 3},
			{get, notFound, 4, 5},
			{get, holds(1, "a", store.InProgress, "", false), 6, 7},
		}, porcupine.Illegal},
		{"two overlapping reservations both acquire", []timed{
			{reserve(1, "a"), acquired, 0, 10},
			{reserve(2, "a"), acquired, 5, 15},
		}, porcupine.Illegal},
		{"two overlapping reservations, one refused", []timed{
			{reserve(1, "a"), acquired, 0, 10},
			{reserve(2, "a"), holds(1, "a", store.InProgress, "", false), 5, 15},
		}, porcupine.Ok},
		{"a refusal that saw the later reservation", []timed{
			{reserve(1, "a"), acquired, 0, 10},
			{reserve(2, "a"), holds(1, "a", store.InProgress, "", false), 0, 5},
		}, porcupine.Ok}, // overlapping: Reserve 1 may have taken effect first
		{"a refusal before anything was there", []timed{
			{reserve(2, "a"), holds(1, "a", store.InProgress, "", false), 0, 5},
			{reserve(1, "a"), acquired, 6, 10},
		}, porcupine.Illegal},
		{"a takeover once the lease ran", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{reserve(2, "a"), tookOver, 150, 151},
			{get, holds(2, "a", store.InProgress, "", false), 152, 153},
			{fenced(opRenew, 1), leaseLost, 154, 155},
			{fenced(opComplete, 1), leaseLost, 156, 157},
			{fenced(opRelease, 1), leaseLost, 158, 159},
		}, porcupine.Ok},
		{"a takeover before the lease ran", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{reserve(2, "a"), tookOver, 50, 51},
		}, porcupine.Illegal},
		{"a takeover by another fingerprint", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{reserve(2, "b"), tookOver, 150, 151},
		}, porcupine.Illegal},
		{"a takeover not asked for", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{func() input { in := reserve(2, "a"); in.TakeOver = false; return in }(), tookOver, 150, 151},
		}, porcupine.Illegal},
		{"a takeover of a completed record", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opComplete, 1), ok, 2, 3},
			{reserve(2, "a"), tookOver, 150, 151},
		}, porcupine.Illegal},
		{"a takeover reported on an absent key", []timed{
			{reserve(1, "a"), tookOver, 0, 1},
		}, porcupine.Illegal},
		{"a refused takeover of a stale lease", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{reserve(2, "a"), holds(1, "a", store.InProgress, "", true), 150, 151},
		}, porcupine.Ok}, // the store may judge either way
		{"a renewal pushes the lease on", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{renewLong, ok, 90, 91},
			{reserve(2, "a"), tookOver, 150, 151},
		}, porcupine.Illegal},
		{"a renewed lease runs out", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{renewLong, ok, 90, 91},
			{reserve(2, "a"), tookOver, 200, 201},
		}, porcupine.Ok},
		{"a lease reported over before it ran", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{get, holds(1, "a", store.InProgress, "", true), 50, 51},
		}, porcupine.Illegal},
		{"a stale holder renews after the takeover", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{reserve(2, "a"), tookOver, 150, 151},
			{fenced(opRenew, 1), ok, 152, 153},
		}, porcupine.Illegal},
		{"a stale holder that nobody took over still holds", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{get, holds(1, "a", store.InProgress, "", true), 150, 151},
			{fenced(opComplete, 1), ok, 152, 153},
		}, porcupine.Ok},
		{"a holder refused its own live record", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opComplete, 1), leaseLost, 2, 3},
		}, porcupine.Illegal},
		{"a completion by a token that never held", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opComplete, 9), ok, 2, 3},
		}, porcupine.Illegal},
		{"a completed value changes", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opComplete, 1), ok, 2, 3},
			{get, holds(1, "a", store.Succeeded, "other", false), 4, 5},
		}, porcupine.Illegal},
		{"a completion repeated after its reply was lost", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opComplete, 1), unknown, 2, never},
			{get, holds(1, "a", store.Succeeded, "v", false), 5, 6},
			{fenced(opComplete, 1), ok, 7, 8},
			{fenced(opComplete, 1), leaseLost, 9, 10},
		}, porcupine.Ok}, // a store may recognise the same completion, or refuse it
		{"a completed record completed again", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opComplete, 1), ok, 2, 3},
			{completeFailed, ok, 4, 5},
		}, porcupine.Illegal},
		{"a succeeded record released", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opComplete, 1), ok, 2, 3},
			{fenced(opRelease, 1), ok, 4, 5},
		}, porcupine.Illegal},
		{"a failed record released and reserved again", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{completeFailed, ok, 2, 3},
			{get, holds(1, "a", store.Failed, "f", false), 4, 5},
			{fenced(opRelease, 1), ok, 6, 7},
			{get, notFound, 8, 9},
			{reserve(2, "b"), acquired, 10, 11},
		}, porcupine.Ok},
		{"a released record read back", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opRelease, 1), ok, 2, 3},
			{get, holds(1, "a", store.InProgress, "", false), 4, 5},
		}, porcupine.Illegal},
		{"a read of another request's identity", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{get, holds(1, "b", store.InProgress, "", false), 2, 3},
		}, porcupine.Illegal},
		{"a lost reservation that took effect", []timed{
			{reserve(1, "a"), unknown, 0, never},
			{get, holds(1, "a", store.InProgress, "", false), 5, 6},
			{fenced(opComplete, 1), ok, 7, 8},
		}, porcupine.Ok},
		{"a lost reservation that did not", []timed{
			{reserve(1, "a"), unknown, 0, never},
			{get, notFound, 5, 6},
			{reserve(2, "a"), acquired, 7, 8},
		}, porcupine.Ok},
		{"a lost reservation that took effect late", []timed{
			{reserve(1, "a"), unknown, 0, never},
			{get, notFound, 5, 6},
			{get, holds(1, "a", store.InProgress, "", false), 7, 8},
		}, porcupine.Ok},
		{"a lost reservation undone", []timed{
			{reserve(1, "a"), unknown, 0, never},
			{get, holds(1, "a", store.InProgress, "", false), 5, 6},
			{get, notFound, 7, 8},
		}, porcupine.Illegal},
		{"a reservation cut by kill -9 and lost", []timed{
			{reserve(1, "a"), unknown, 0, 10}, // killed at 10
			{get, notFound, 20, 21},
			{reserve(2, "a"), acquired, 22, 23},
		}, porcupine.Ok},
		{"a reservation cut by kill -9 and kept", []timed{
			{reserve(1, "a"), unknown, 0, 10},
			{get, holds(1, "a", store.InProgress, "", false), 20, 21},
		}, porcupine.Ok},
		{"a reservation cut by kill -9 that appears after the restart", []timed{
			{reserve(1, "a"), unknown, 0, 10},
			{get, notFound, 20, 21},
			{get, holds(1, "a", store.InProgress, "", false), 22, 23},
		}, porcupine.Illegal},
		{"a lost completion that took effect", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opComplete, 1), unknown, 2, never},
			{get, holds(1, "a", store.Succeeded, "v", false), 5, 6},
		}, porcupine.Ok},
		{"a lost completion with a token that never held", []timed{
			{reserve(1, "a"), acquired, 0, 1},
			{fenced(opComplete, 9), unknown, 2, never},
			{get, holds(9, "a", store.Succeeded, "v", false), 5, 6},
		}, porcupine.Illegal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ops []porcupine.Operation
			for i, o := range tc.ops {
				in := o.in
				in.Call, in.Return = o.call, o.ret
				ops = append(ops, porcupine.Operation{ClientId: i, Input: in, Call: o.call, Output: o.out, Return: o.ret})
			}
			if got := porcupine.CheckOperationsTimeout(model(0), ops, 0); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestUnknownAfterEveryReturn: an operation whose outcome is unknown and
// that began after every other had returned is placed after its call, not
// before it: such a history is linearizable.
func TestUnknownAfterEveryReturn(t *testing.T) {
	h := &History{}
	key := "k"
	h.ops = append(h.ops,
		porcupine.Operation{ClientId: 0, Call: 0, Return: 10,
			Input:  input{Key: key, Kind: opReserve, Token: 1, Match: "m", Ident: "i", Call: 0, Return: 10, Lease: 1000},
			Output: output{Outcome: outOK, Acquired: true}},
		porcupine.Operation{ClientId: 1, Call: 20, Return: never,
			Input:  input{Key: key, Kind: opGet, Call: 20, Return: never},
			Output: output{Outcome: outUnknown}},
	)
	if res, _ := h.Check(0); res != porcupine.Ok {
		t.Fatalf("check: %v, want Ok", res)
	}
}
