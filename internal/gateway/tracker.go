package gateway

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/idem-dev/idem/store"
)

// TrackedKey is a key the admin page lists. The page, behind the admin
// token, shows the scope and key as they are, so that an operator can
// inspect and release them, and the hashes logs and traces name them by.
type TrackedKey struct {
	Scope     string    `json:"scope"`
	Key       string    `json:"key"`
	ScopeHash string    `json:"scope_hash,omitempty"` // as logs print it (idem.Redactor)
	KeyHash   string    `json:"key_hash,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	Since     time.Time `json:"since"`
	// State is the record's state when it was looked up (outcome_unknown
	// list only).
	State string `json:"state,omitempty"`
}

// Tracker watches a store's traffic for the admin page: the keys this
// gateway holds right now, and the keys whose last reservation here ended
// failed or was never ended (candidates for an unknown outcome). Stores
// cannot list their keys, so the page shows what this process has seen.
// Its zero value is ready to use.
type Tracker struct {
	// Max bounds the failed keys remembered; 0 means 100. The oldest go
	// first.
	Max int

	mu       sync.Mutex
	inflight map[trackID]TrackedKey // guarded by mu
	failed   map[string]TrackedKey  // by scope+keyHash; guarded by mu
}

type trackID struct {
	hash  string
	token uint64
}

// Wrap returns s reporting to t. The wrapper's Unwrap returns s.
func (t *Tracker) Wrap(s store.Store) store.Store { return &tracked{Store: s, t: t} }

// Held counts the keys this gateway holds right now.
func (t *Tracker) Held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.inflight)
}

// forgetAfter drops a held key the tracker never saw end (its completion
// failed in the store, and the engine gave up): no request holds a key
// for this long, as upstream_deadline bounds every call.
const forgetAfter = time.Hour

// InProgress lists the keys this gateway holds, oldest first.
func (t *Tracker) InProgress() []TrackedKey {
	t.mu.Lock()
	l := make([]TrackedKey, 0, len(t.inflight))
	for id, k := range t.inflight {
		if time.Since(k.Since) > forgetAfter {
			delete(t.inflight, id)
			continue
		}
		l = append(l, k)
	}
	t.mu.Unlock()
	sort.Slice(l, func(i, j int) bool { return l[i].Since.Before(l[j].Since) })
	return l
}

// Candidates lists the keys that may have an unknown outcome, newest
// first: the ones whose last reservation here ended failed, and the ones a
// request found failed or held by a dead holder. The caller looks each up.
func (t *Tracker) Candidates(now time.Time) []TrackedKey {
	t.mu.Lock()
	l := make([]TrackedKey, 0, len(t.failed))
	for _, k := range t.failed {
		l = append(l, k)
	}
	t.mu.Unlock()
	sort.Slice(l, func(i, j int) bool { return l[i].Since.After(l[j].Since) })
	return l
}

// forget drops what is known of the failure of key in scope.
func (t *Tracker) forget(scope, key string) {
	t.mu.Lock()
	for id, k := range t.failed {
		if k.Scope == scope && k.Key == key {
			delete(t.failed, id)
		}
	}
	t.mu.Unlock()
}

func (t *Tracker) reserved(r store.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inflight == nil {
		t.inflight = map[trackID]TrackedKey{}
	}
	t.inflight[trackID{r.KeyHash, r.Token}] = TrackedKey{Scope: r.Scope, Key: r.Key, RequestID: r.RequestID, Since: time.Now()}
	// A new holder: whatever was known of an earlier failure is over.
	delete(t.failed, r.Scope+"\x00"+r.KeyHash)
}

// candidate remembers a record that may have an unknown outcome.
func (t *Tracker) candidate(r store.Record, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.keep(r.Scope+"\x00"+r.KeyHash, TrackedKey{Scope: r.Scope, Key: r.Key, RequestID: r.RequestID, Since: at})
}

// keep adds k to the failed keys, dropping the oldest beyond Max. t.mu
// is held.
func (t *Tracker) keep(id string, k TrackedKey) {
	if t.failed == nil {
		t.failed = map[string]TrackedKey{}
	}
	max := t.Max
	if max <= 0 {
		max = 100
	}
	if _, ok := t.failed[id]; !ok {
		for len(t.failed) >= max {
			var oldest string
			var at time.Time
			for id, k := range t.failed {
				if oldest == "" || k.Since.Before(at) {
					oldest, at = id, k.Since
				}
			}
			delete(t.failed, oldest)
		}
	}
	t.failed[id] = k
}

// ended records the end of a reservation; failed keeps it as a candidate.
func (t *Tracker) ended(f store.Fence, failed bool, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := trackID{f.KeyHash, f.Token}
	k, ok := t.inflight[id]
	delete(t.inflight, id)
	if !ok || !failed {
		return
	}
	k.Since = at
	t.keep(f.Scope+"\x00"+f.KeyHash, k)
}

// tracked is a store reporting to a Tracker.
type tracked struct {
	store.Store
	t *Tracker
}

// Unwrap returns the decorated store, for callers that look for optional
// methods.
func (s *tracked) Unwrap() store.Store { return s.Store }

func (s *tracked) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	r, err := s.Store.Reserve(ctx, req)
	switch {
	case err != nil:
	case r.Acquired:
		s.t.reserved(req.Record)
	case r.Existing.State == store.Failed || r.Existing.Stale():
		// A retry found a failed record or a dead holder (perhaps left
		// by another gateway, or before a restart): a candidate too.
		s.t.candidate(r.Existing, time.Now())
	}
	return r, err
}

func (s *tracked) Complete(ctx context.Context, c store.Completion) error {
	err := s.Store.Complete(ctx, c)
	// After an error the key may still be held (the reply was lost): it
	// stays listed until its lease ends or it is taken over.
	switch {
	case err == nil:
		s.t.ended(c.Fence, c.State == store.Failed, time.Now())
	case errors.Is(err, store.ErrLeaseLost):
		s.t.ended(c.Fence, false, time.Now()) // no longer ours
	}
	return err
}

func (s *tracked) Release(ctx context.Context, f store.Fence) error {
	err := s.Store.Release(ctx, f)
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		s.t.ended(f, false, time.Now())
	}
	return err
}
