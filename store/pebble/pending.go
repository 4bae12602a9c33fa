package pebblestore

import (
	"context"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/hold"
)

// pending is a reservation taken under Options.OneSync that may be taken
// over once stale: it is held in memory, under its key's stripe, until
// its holder's Complete writes the outcome in one batch, with one pass
// through Pebble's commit pipeline and nothing for its memtable to keep
// of the reservation. It is held so for Options.HoldFor at most: the
// sweeper commits those held longer without a sync (sweepHeld), so that
// a process killed during a slow call leaves the key in progress; a
// crash before that loses it with its holder, and the key is free again,
// as on_stale: retry would make it after a lease. Close writes the ones
// left (see writePending).
type pending struct {
	rec   store.Record  // in_progress
	lease time.Duration // the lease rec.LeaseUntil was set from
	// old is the record the engine holds for the key, which rec
	// replaces (expired, or stale and taken over); nil when none.
	old  *store.Record
	tick uint32 // the sweep count when it was taken (hold.Due)
}

// current returns keyHash's record as callers see it (cur: its pending
// reservation, or else what the engine holds), the record the engine
// holds (disk), and the pending reservation (nil when none); nil records
// when absent. The caller holds the key's stripe.
func (s *Store) current(keyHash string) (cur, disk *store.Record, p *pending, err error) {
	if p = s.pending[s.stripeIndex(keyHash)][keyHash]; p != nil {
		r := p.rec
		return &r, p.old, p, nil
	}
	disk, err = s.read(keyHash)
	return disk, disk, nil, err
}

// hold keeps p as keyHash's pending reservation; the caller holds the
// key's stripe.
func (s *Store) hold(keyHash string, p *pending) {
	i := s.stripeIndex(keyHash)
	if s.pending[i] == nil {
		s.pending[i] = map[string]*pending{}
	}
	if _, ok := s.pending[i][keyHash]; !ok {
		s.npending.Add(1)
	}
	s.pending[i][keyHash] = p
}

// drop forgets keyHash's pending reservation, if any; the caller holds
// the key's stripe.
func (s *Store) drop(keyHash string) {
	i := s.stripeIndex(keyHash)
	if _, ok := s.pending[i][keyHash]; ok {
		delete(s.pending[i], keyHash)
		s.npending.Add(-1)
	}
}

// sweepPending drops up to max pending reservations whose lifetime ended
// at now (their holders never completed nor released them), and returns
// how many. The caller holds cleanMu, which orders stripes taken one by
// one after it.
func (s *Store) sweepPending(now time.Time, max int) int {
	n := 0
	for i := range s.stripes {
		if s.npending.Load() == 0 || max > 0 && n >= max {
			break
		}
		s.stripes[i].Lock()
		for k, p := range s.pending[i] {
			if max > 0 && n >= max {
				break
			}
			if !now.Before(p.rec.ExpiresAt) {
				delete(s.pending[i], k)
				s.npending.Add(-1)
				n++
			}
		}
		s.stripes[i].Unlock()
	}
	return n
}

// countPending counts the pending reservations whose lifetime ended at
// now.
func (s *Store) countPending(now time.Time) int {
	n := 0
	for i := range s.stripes {
		if s.npending.Load() == 0 {
			break
		}
		s.stripes[i].Lock()
		for _, p := range s.pending[i] {
			if !now.Before(p.rec.ExpiresAt) {
				n++
			}
		}
		s.stripes[i].Unlock()
	}
	return n
}

// writePending writes the pending reservations in one synced commit, so
// that a Close keeps them as it keeps every other record; closeMu is
// write-held, so no call holds a stripe.
func (s *Store) writePending() error {
	if s.npending.Load() == 0 {
		return nil
	}
	return s.commit(func(db *pebble.DB) error {
		b := db.NewBatch()
		defer b.Close()
		for i := range s.pending {
			for _, p := range s.pending[i] {
				if err := s.addRecord(b, &p.rec, p.old, p.lease); err != nil {
					return err
				}
			}
		}
		return b.Commit(pebble.Sync)
	})
}

// sweepHeld commits the pending reservations held longer than
// Options.HoldFor, a stripe at a time and without a sync, and forgets
// them: from then on they are records like others. Pebble keeps a commit
// without a sync in its WAL's buffer until a block fills or a sync asks
// for it, so that on an idle store a kill would still lose it: once the
// stripes are released, one synced empty log record writes them all
// out. Each stripe is so held for a commit that waits for no disk, and a
// sweep syncs once, only when it wrote something. A commit that fails
// leaves its reservations pending, to be tried again at the next sweep.
func (s *Store) sweepHeld(now uint32) {
	if s.npending.Load() == 0 {
		return
	}
	if err := s.begin(context.Background()); err != nil {
		return
	}
	defer s.closeMu.RUnlock()
	wrote := false
	for i := range s.stripes {
		if s.npending.Load() == 0 {
			break
		}
		s.stripes[i].Lock()
		n, err := s.writeHeld(i, now)
		s.stripes[i].Unlock()
		wrote = wrote || n > 0
		if err != nil {
			break
		}
	}
	if wrote {
		_ = s.commit(func(db *pebble.DB) error { return db.LogData(nil, pebble.Sync) })
	}
}

// writeHeld commits stripe i's pending reservations held longer than the
// bound at sweep now, without a sync, forgets them and returns how many;
// the caller holds the stripe.
func (s *Store) writeHeld(i int, now uint32) (int, error) {
	var due []string
	for k, p := range s.pending[i] {
		if hold.Due(p.tick, now) {
			due = append(due, k)
		}
	}
	if len(due) == 0 || s.failed.isSet() {
		return 0, nil
	}
	err := s.commit(func(db *pebble.DB) error {
		b := db.NewBatch()
		defer b.Close()
		for _, k := range due {
			p := s.pending[i][k]
			if err := s.addRecord(b, &p.rec, p.old, p.lease); err != nil {
				return err
			}
		}
		s.gate.Wrote(len(b.Repr()))
		return b.Commit(pebble.NoSync)
	})
	if err != nil {
		return 0, err
	}
	for _, k := range due {
		s.drop(k)
	}
	return len(due), nil
}
