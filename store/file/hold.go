package file

import (
	"context"

	"github.com/idem-dev/idem/store/internal/hold"
)

// sweepHeld appends the frames of the reservations kept in memory for
// longer than Options.HoldFor, a stripe at a time, and then, with no
// stripe held, waits for their batch: the wait writes the frames, joining
// or starting a group commit, so that a process killed during a slow call
// leaves its key in progress. Such a reservation is then pending like a
// taken-over one: its holder's write goes after it, anyone else settles
// it, and should its sync fail it is kept in memory again (see unwrite).
func (s *Store) sweepHeld(now uint32) {
	if s.nkept.Load() == 0 {
		return
	}
	if err := s.begin(context.Background()); err != nil {
		return
	}
	defer s.closeMu.RUnlock()
	var batches []*batch
	for i := range s.stripes {
		if s.nkept.Load() == 0 {
			break
		}
		st := &s.stripes[i]
		st.mu.Lock()
		batches = s.writeHeld(st, now, batches)
		st.mu.Unlock()
	}
	for _, b := range batches {
		_ = s.log.wait(b) // a failure is settled by the key's next caller
	}
}

// writeHeld appends the frames of st's reservations kept in memory for
// longer than the bound at sweep now, points the index at them, and returns
// batches with theirs added. The stripe is held.
func (s *Store) writeHeld(st *stripe, now uint32, batches []*batch) []*batch {
	for i := range st.pend {
		p := &st.pend[i]
		if p.b != nil || !hold.Due(p.tick, now) {
			continue
		}
		slot := keptSlot(st, &p.id, p.e.off)
		if slot < 0 {
			continue // gone (swept): prune drops it
		}
		w, err := s.putAsync(st, p.id, slot, &p.rec, p.lease)
		if err != nil {
			continue // too large: a reservation, without a value, is not
		}
		w.rec, w.lease, w.tick, w.kept = p.rec, p.lease, p.tick, true
		*p = w
		s.nkept.Add(-1)
		if n := len(batches); n == 0 || batches[n-1] != w.b {
			batches = append(batches, w.b)
		}
	}
	return batches
}

// unwrite undoes p, a frame whose sync failed, and returns, if p was a
// sweep's frame of a reservation kept in memory (kept) and the key's
// entry is that reservation's again, the reservation kept in memory as
// before the sweep: it is still its holder's. The stripe is held.
func (s *Store) unwrite(st *stripe, p *pending) (pending, bool) {
	s.undo(st, p)
	if !p.kept {
		return pending{}, false
	}
	if keptSlot(st, &p.id, p.before.off) < 0 {
		return pending{}, false
	}
	return pending{id: p.id, e: p.before, rec: p.rec, lease: p.lease, tick: p.tick}, true
}
