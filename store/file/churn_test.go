package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
)

// churn writes reserve+complete pairs of new keys with ttl from 8
// goroutines for d, and runs Cleanup every every (with clean; without,
// none runs, as when the gateway's interval outlasts the run); before
// each Cleanup and after it, it reads the log's size and its live bytes
// (ratio). It returns the largest ratio of log to live data seen after a
// Cleanup, and before one, and the pairs written; check, if set, runs
// after each Cleanup with the store's own count of its log and live data.
func churn(t *testing.T, s *Store, ttl, d, every time.Duration, clean bool, check func(total, live int64)) (after, before float64, pairs int64) {
	ctx := context.Background()
	stop := make(chan struct{})
	var n atomic.Int64
	var wg sync.WaitGroup
	value := []byte(`{"status":201,"headers":{"Content-Type":["application/json"]},"body":"eyJpZCI6ImNoXzEyMyIsImFtb3VudCI6MTAwMH0="}`)
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
				req := localtest.ReserveReq(fmt.Sprintf("churn-%d-%d", w, i), ttl)
				if _, err := s.Reserve(ctx, req); err != nil {
					t.Error(err)
					return
				}
				if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded, Value: value, TTL: ttl}); err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	end := time.Now().Add(d)
	warm := time.Now().Add(ttl) // the log fills for a TTL before records expire
	for time.Now().Before(end) {
		time.Sleep(every)
		if r := ratio(t, s); time.Now().After(warm) {
			before = max(before, r)
		}
		if clean {
			if _, err := s.Cleanup(ctx, 0); err != nil {
				t.Fatal(err)
			}
		}
		if r := ratio(t, s); time.Now().After(warm) {
			after = max(after, r)
		}
		if check != nil {
			check(s.log.sizes())
		}
	}
	close(stop)
	wg.Wait()
	return after, before, n.Load()
}

// ratio returns the log's bytes on disk (its segment files, the zeros
// written ahead of their frames included) over the bytes of the frames of
// the records not expired: the index counts expired records as live until
// a sweep (Cleanup's, or a rotation's) removes them, and the store's own
// count of its log is what it acts on, not what a user sees on disk.
func ratio(t *testing.T, s *Store) float64 {
	live := s.unexpiredBytes(s.clock.Now())
	disk, err := diskBytes(s.log.dir)
	if err != nil {
		t.Fatal(err)
	}
	if live == 0 {
		return 0
	}
	return float64(disk) / float64(live)
}

// diskBytes returns the bytes of dir's segment files; a rotation's work
// may drop one while it runs.
func diskBytes(dir string) (int64, error) {
	ids, err := segmentIDs(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, id := range ids {
		fi, err := os.Stat(filepath.Join(dir, segmentName(id)))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}

// TestChurnDiskBound: after a Cleanup the log holds at most twice its
// live data, every segment counted (the one being written too), so disk
// follows the live data, not the writes.
//
// First, on the store's own clock: two segments of records that live on,
// then three of records that expire, and one Cleanup. The oldest segments
// are all live and the log is under twice its live data plus two
// segments; one Cleanup must compact them and drop the dead ones all the
// same. Then under churn, records expiring while new ones arrive (a TTL
// of 300 ms), Cleanup every 50 ms, checked once the live data spans two
// segments (with less, the segment being written alone may pass the
// bound).
func TestChurnDiskBound(t *testing.T) {
	t.Parallel()
	const seg = 256 << 10
	t.Run("one Cleanup", func(t *testing.T) {
		var clock atomic.Int64
		clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		now := func() time.Time { return time.Unix(0, clock.Load()) }
		s := openT(t, t.TempDir(), func(o *Options) { o.SegmentBytes = seg; o.now = now; o.cleanupOnly = true })
		ctx := context.Background()
		value := []byte(`{"status":201,"body":"eyJpZCI6ImNoXzEyMyIsImFtb3VudCI6MTAwMH0="}`)
		write := func(prefix string, ttl time.Duration, until func(total, live int64) bool) {
			for i := 0; ; i++ {
				if total, live := s.log.sizes(); until(total, live) {
					return
				}
				req := localtest.ReserveReq(fmt.Sprintf("%s-%d", prefix, i), ttl)
				if _, err := s.Reserve(ctx, req); err != nil {
					t.Fatal(err)
				}
				if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded, Value: value, TTL: ttl}); err != nil {
					t.Fatal(err)
				}
			}
		}
		write("kept", time.Hour, func(_, live int64) bool { return live >= 2*seg })
		_, kept := s.log.sizes()
		write("gone", time.Minute, func(total, _ int64) bool { return total >= 2*kept+kept/2 })
		clock.Add(int64(2 * time.Minute))
		if _, err := s.Cleanup(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if total, live := s.log.sizes(); total > 2*live {
			t.Errorf("after one Cleanup the log holds %d bytes for %d live", total, live)
		}
	})
	t.Run("churn", func(t *testing.T) {
		s := openT(t, t.TempDir(), func(o *Options) { o.SegmentBytes = seg })
		after, before, pairs := churn(t, s, 300*time.Millisecond, 2*time.Second, 50*time.Millisecond, true, func(total, live int64) {
			if live >= 2*seg && total > 2*live {
				t.Errorf("after Cleanup the log holds %d bytes for %d live", total, live)
			}
		})
		t.Logf("%d pairs; log/live at most %.2f after a Cleanup, %.2f before", pairs, after, before)
	})
}

// TestChurnRatios measures (IDEM_FILE_CHURN=1, not part of make test) the
// log's bytes on disk against the bytes of the frames of records not
// expired (ratio) under churn, over several TTLs, each run for four TTLs
// on segments of at most 4 MiB (or IDEM_FILE_CHURN_SEGMENT's), with
// Cleanup every second and with none (the gateway cleans every 300 s by
// default), sampled every second. docs/bench/FILE-LOG.md quotes it.
func TestChurnRatios(t *testing.T) {
	if os.Getenv("IDEM_FILE_CHURN") == "" {
		t.Skip("a measurement: IDEM_FILE_CHURN=1 runs it")
	}
	// IDEM_FILE_CHURN_SEGMENT sets the largest segment in bytes
	// (SegmentBytes); segments are smaller while an eighth of the live
	// data is.
	seg := int64(4 << 20)
	if v := os.Getenv("IDEM_FILE_CHURN_SEGMENT"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seg = n
	}
	for _, clean := range []bool{true, false} {
		for _, ttl := range []time.Duration{2 * time.Second, 5 * time.Second, 15 * time.Second} {
			s := openT(t, t.TempDir(), func(o *Options) { o.SegmentBytes = seg })
			after, before, pairs := churn(t, s, ttl, 4*ttl, time.Second, clean, nil)
			total, err := diskBytes(s.log.dir)
			if err != nil {
				t.Fatal(err)
			}
			live := s.unexpiredBytes(s.clock.Now())
			t.Logf("Cleanup %v, TTL %v: %d pairs (%.0f/s); log/live at most %.2f after a Cleanup (or a sample), %.2f before one; at the end %d MiB for %d MiB live",
				clean, ttl, pairs, float64(pairs)/(4*ttl).Seconds(), after, before, total>>20, live>>20)
			s.Close()
		}
	}
}
