package history

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// snapshotStore is a memory store kept in a directory as a snapshot of
// its records: after every write when synced, else every 100 ms and at
// Close, so that a kill -9 loses the writes of the last 100 ms, calls that
// returned included.
//
// With oneSync, a reservation that may be taken over is not snapshotted
// by its Reserve, only by the next write's snapshot (or the next 100 ms),
// as the embedded stores' OneSync leaves its sync to the next write.
type snapshotStore struct {
	*memory.Store
	path    string
	synced  bool
	oneSync bool
	mu      sync.Mutex // serializes writes and snapshots
	stop    chan struct{}
	done    chan struct{}
}

func openSnapshot(dir string, synced bool) (store.Store, error) {
	s := &snapshotStore{Store: memory.New(), path: filepath.Join(dir, "snapshot.json"), synced: synced,
		stop: make(chan struct{}), done: make(chan struct{})}
	b, err := os.ReadFile(s.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var recs []store.Record
	if len(b) > 0 {
		if err := json.Unmarshal(b, &recs); err != nil {
			return nil, err
		}
	}
	ctx := context.Background()
	for _, r := range recs {
		// A lease runs on to the end it had, on the wall clock (as the
		// embedded stores carry it across a restart).
		state, value := r.State, r.Value
		r.State, r.Value = store.InProgress, nil
		lease := max(time.Until(r.LeaseUntil), time.Nanosecond)
		if _, err := s.Store.Reserve(ctx, store.ReserveRequest{Record: r, Lease: lease, TTL: time.Hour}); err != nil {
			return nil, err
		}
		if state != store.InProgress {
			f := store.Fence{KeyHash: r.KeyHash, Scope: r.Scope, Token: r.Token}
			if err := s.Store.Complete(ctx, store.Completion{Fence: f, State: state, Value: value, TTL: time.Hour}); err != nil {
				return nil, err
			}
		}
	}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(100 * time.Millisecond):
				s.mu.Lock()
				s.snapshot()
				s.mu.Unlock()
			}
		}
	}()
	return s, nil
}

// snapshot writes every record to the snapshot file. s.mu is held.
func (s *snapshotStore) snapshot() {
	var recs []store.Record
	for _, k := range s.Keys() {
		if r, err := s.Store.Get(context.Background(), "", k); err == nil {
			recs = append(recs, r)
		}
	}
	b, err := json.Marshal(recs)
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile(s.path+".tmp", b, 0o600); err != nil {
		panic(err)
	}
	if err := os.Rename(s.path+".tmp", s.path); err != nil {
		panic(err)
	}
}

// write runs a write and, when synced, snapshots before it returns.
func (s *snapshotStore) write(fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := fn()
	if s.synced {
		s.snapshot()
	}
	return err
}

func (s *snapshotStore) Reserve(ctx context.Context, req store.ReserveRequest) (res store.Reservation, err error) {
	if s.oneSync && req.TakeOverStale {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.Store.Reserve(ctx, req)
	}
	err = s.write(func() error { res, err = s.Store.Reserve(ctx, req); return err })
	return res, err
}

// Get reads under the lock too: a read must not see a write before it is
// kept.
func (s *snapshotStore) Get(ctx context.Context, scope, keyHash string) (r store.Record, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.Get(ctx, scope, keyHash)
}

func (s *snapshotStore) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	return s.write(func() error { return s.Store.Renew(ctx, f, lease) })
}

func (s *snapshotStore) Complete(ctx context.Context, c store.Completion) error {
	return s.write(func() error { return s.Store.Complete(ctx, c) })
}

func (s *snapshotStore) Release(ctx context.Context, f store.Fence) error {
	return s.write(func() error { return s.Store.Release(ctx, f) })
}

func (s *snapshotStore) Close() error {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	s.snapshot()
	s.mu.Unlock()
	return s.Store.Close()
}

// TestCrashDurable: a store that keeps every write before it returns passes
// RunCrash.
func TestCrashDurable(t *testing.T) {
	t.Parallel()
	RunCrash(t, func(dir string) (store.Store, error) { return openSnapshot(dir, true) })
}

// TestCrashLostWritesFail: a store that loses the writes of its last 100 ms
// to a kill -9 fails RunCrash's check: clients saw what the restart lost.
func TestCrashLostWritesFail(t *testing.T) {
	t.Parallel()
	h := runCrash(t, func(dir string) (store.Store, error) { return openSnapshot(dir, false) }, false)
	if res, _ := h.Check(checkTimeout); res != porcupine.Illegal {
		t.Errorf("a store that lost acknowledged writes to kill -9: %s, want %s", res, porcupine.Illegal)
	}
}

// openOneSync opens a snapshotStore that leaves a reservation that may be
// taken over to the next write's snapshot.
func openOneSync(dir string) (store.Store, error) {
	s, err := openSnapshot(dir, true)
	if err != nil {
		return nil, err
	}
	s.(*snapshotStore).oneSync = true
	return s, nil
}

// TestCrashOneSync: a store that returns a reservation that may be taken
// over before keeping it passes RunCrashOneSync.
func TestCrashOneSync(t *testing.T) {
	t.Parallel()
	RunCrashOneSync(t, openOneSync)
}

// TestCrashOneSyncLostWritesFail: RunCrashOneSync forgives lost
// reservations only: a store that loses the completions of its last
// 100 ms to a kill -9 fails it.
func TestCrashOneSyncLostWritesFail(t *testing.T) {
	t.Parallel()
	h := runCrash(t, func(dir string) (store.Store, error) { return openSnapshot(dir, false) }, true)
	if res, _ := h.Check(checkTimeout); res != porcupine.Illegal {
		t.Errorf("a store that lost acknowledged writes to kill -9: %s, want %s", res, porcupine.Illegal)
	}
}
