package file

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
)

// TestChurnWithoutCleanup: records expiring while new ones arrive and no
// Cleanup at all, as when the gateway's cleanup interval (300 s by
// default) is many TTLs long: the log's rotations remove the expired
// records and compact, so that disk follows the data still live, not the
// writes or the Cleanups. The store's clock is the test's: it moves 50 ms
// (of a 300 ms TTL) at a time, while the writers are paused; after each
// step the writers go on until the log moves to a new segment, then
// pause again and, once that rotation's work is done, the log holds at
// most twice the bytes of the records not expired by then plus three
// segments (the two that reclaim leaves, and the one being written).
func TestChurnWithoutCleanup(t *testing.T) {
	t.Parallel()
	const seg = 64 << 10
	const ttl, step = 300 * time.Millisecond, 50 * time.Millisecond
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	s := openT(t, t.TempDir(), func(o *Options) { o.SegmentBytes = seg; o.now = now })
	ctx := context.Background()
	var gate sync.RWMutex // writers hold it read; the checker holds it
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				gate.RLock()
				req := localtest.ReserveReq(fmt.Sprintf("rot-%d-%d", w, i), ttl)
				_, err := s.Reserve(ctx, req)
				if err == nil {
					err = s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded, Value: []byte(`{"status":201}`), TTL: ttl})
				}
				gate.RUnlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	active := func() uint64 {
		s.log.mu.Lock()
		defer s.log.mu.Unlock()
		return s.log.active.id
	}
	var worst float64
	const steps = 30 // five TTLs
	for k := range steps {
		gate.Lock()
		clock.Add(int64(step))
		from := active()
		gate.Unlock()
		localtest.Eventually(t, "a rotation", func() bool { return active() != from })
		gate.Lock()
		localtest.Eventually(t, "the work of the rotation done", func() bool { return !s.snapRunning.Load() })
		total, _ := s.log.sizes()
		live := s.unexpiredBytes(now())
		gate.Unlock()
		if k*int(step) < int(ttl) {
			continue // nothing has expired yet
		}
		if total > 2*live+3*seg {
			t.Errorf("step %d: the log holds %d bytes for %d live", k, total, live)
		}
		worst = max(worst, float64(total)/float64(live))
	}
	t.Logf("log/live at most %.2f", worst)
}

// unexpiredBytes returns the bytes of the frames of the records not
// expired at now.
func (s *Store) unexpiredBytes(now time.Time) int64 {
	var n int64
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		for slot := range st.slots {
			if e := st.at(slot); e.state != stateFree && !e.expired(nanos(now)) {
				n += int64(e.size)
			}
		}
		st.mu.Unlock()
	}
	return n
}

// TestRotationCrash: the kills of TestSnapshotCrash on a child that never
// runs Cleanup, so that the log's rotations sweep the records of short
// TTLs, drop and compact segments and write snapshots in the background:
// a kill during any of that leaves every acknowledged key as it was.
func TestRotationCrash(t *testing.T) {
	t.Parallel()
	snapCrash(t, "rotation")
}
