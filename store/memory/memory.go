// Package memory is an in-process idem store for tests and single-process
// programs that do not need records to outlive the process.
package memory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/idem-dev/idem/internal/wakeup"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/expiry"
	"github.com/idem-dev/idem/store/internal/monoclock"
	"github.com/idem-dev/idem/store/internal/packed"
)

// Store keeps records in a map guarded by one mutex, and an expiry index
// with one item per write that Cleanup takes (items of records rewritten
// or released since are dropped then, so the index can hold more items
// than records until their times pass). Its zero value is not usable; call
// New.
//
// Records are kept packed with their values (store/internal/packed), by
// value in a map keyed by 32 bytes: one object and one pointer a record,
// where a map of *store.Record held about eight objects and fourteen
// pointers. The garbage collector scans every record a store keeps on
// every cycle, which in-process programs pay on every request.
type Store struct {
	mu      sync.Mutex
	records map[id]packed.Record // guarded by mu
	expiry  *expiry.Index[id]
	closed  bool // guarded by mu
	clock   *monoclock.Clock

	// hub wakes the waiters of the engines sharing this store (notify.go).
	hub wakeup.Hub
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.LegacyFree = (*Store)(nil)
)

// New returns an empty store.
//
// Its leases and expiry are judged on the process's monotonic clock, from
// a wall reading taken at New (store/doc.go, "One clock for a lease"): a
// jump of the machine's wall clock moves neither.
func New(opts ...Option) *Store {
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	c := monoclock.New(nil)
	if o.now != nil {
		c = monoclock.Stepped(o.now)
	}
	return &Store{records: make(map[id]packed.Record), expiry: expiry.New[id](), clock: c}
}

// HoldsNoLegacyRecords reports true: a memory store starts empty in every
// process, so no earlier version of idem wrote any of its records, and the
// engine looks for none under their former identities.
func (*Store) HoldsNoLegacyRecords() bool { return true }

// Option configures a Store.
type Option func(*options)

type options struct{ now func() time.Time }

// WithClock makes the store read every instant from now instead: tests use
// it to pass leases and lifetimes without sleeping. Unlike the default, it
// follows every jump of now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// id is a record's key in the map: the 32 bytes behind its hex KeyHash,
// so that neither the map nor the expiry index holds a pointer for the
// garbage collector to follow. A key hash of another form (the store
// accepts any) is hashed to 32 bytes instead; the record keeps its
// KeyHash as given.
type id [32]byte

func idOf(keyHash string) id {
	var k id
	if len(keyHash) == 2*len(k) {
		if _, err := hex.Decode(k[:], []byte(keyHash)); err == nil {
			return k
		}
	}
	return sha256.Sum256([]byte(keyHash))
}

// record unpacks p as read at now, with a copy of its value.
func record(p *packed.Record, now time.Time) store.Record {
	r := p.ReadAt(now)
	r.Value = p.Value()
	return r
}

func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	return nil
}

// Reserve implements store.Store.
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	if err := s.lock(ctx); err != nil {
		return store.Reservation{}, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	k := idOf(req.Record.KeyHash)
	cur, ok := s.records[k]
	tookOver := false
	if ok && !cur.Expired(now) {
		if !(req.TakeOverStale && cur.Stale(now) &&
			cur.Fingerprint() == req.Record.Fingerprint && cur.Binding() == req.Record.Binding) {
			return store.Reservation{Existing: record(&cur, now)}, nil
		}
		tookOver = true
	}
	r := req.Record
	r.State = store.InProgress
	r.Value = nil
	r.CreatedAt, r.UpdatedAt = now, now
	r.ExpiresAt, r.LeaseUntil = now.Add(req.TTL), now.Add(req.Lease)
	s.put(k, packed.Pack(&r))
	return store.Reservation{Acquired: true, TookOver: tookOver}, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, _, keyHash string) (store.Record, error) {
	if err := s.lock(ctx); err != nil {
		return store.Record{}, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	cur, ok := s.records[idOf(keyHash)]
	if !ok || cur.Expired(now) {
		return store.Record{}, store.ErrNotFound
	}
	return record(&cur, now), nil
}

// held returns the in_progress record that f's token holds. s.mu is held.
func (s *Store) held(f store.Fence) (id, packed.Record, error) {
	k := idOf(f.KeyHash)
	cur, ok := s.records[k]
	if !ok || cur.State() != store.InProgress || cur.Token != f.Token {
		return k, packed.Record{}, store.ErrLeaseLost
	}
	return k, cur, nil
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	k, cur, err := s.held(f)
	if err != nil {
		return err
	}
	cur.SetLeaseUntil(s.clock.Now().Add(lease))
	s.records[k] = cur
	return nil
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	k, cur, err := s.held(c.Fence)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	cur.Complete(c.State, now, now.Add(c.TTL))
	s.put(k, cur.WithValue(c.Value))
	return nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	k := idOf(f.KeyHash)
	cur, ok := s.records[k]
	if !ok || cur.Token != f.Token || cur.State() == store.Succeeded {
		return store.ErrLeaseLost
	}
	delete(s.records, k)
	return nil
}

// Cleanup implements store.Store. It takes the due items of the expiry
// index, so its cost is proportional to the expired entries, never to the
// live ones.
func (s *Store) Cleanup(ctx context.Context, limit int) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	return s.expiry.Sweep(ctx, now, limit, func(it expiry.Item[id]) bool {
		if cur, ok := s.records[it.Key]; ok && it.At(cur.ExpiresAt()) && cur.Expired(now) {
			delete(s.records, it.Key)
			return true
		}
		return false
	})
}

// Len returns the number of records held, expired or not.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Keys returns the index keys of the records held (key hashes).
func (s *Store) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.records))
	for _, r := range s.records {
		keys = append(keys, r.KeyHash())
	}
	return keys
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.records = nil
	s.hub.WakeAll() // waiters poll, and find the store closed
	return nil
}

// put stores r under k and indexes its expiry. s.mu is held.
func (s *Store) put(k id, r packed.Record) {
	s.records[k] = r
	s.expiry.Add(k, r.ExpiresAt())
}

// CountExpired counts the records that have expired (`idem cleanup --dry-run`).
func (s *Store) CountExpired(ctx context.Context) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	n := 0
	for _, r := range s.records {
		if r.Expired(now) {
			n++
		}
	}
	return n, nil
}
