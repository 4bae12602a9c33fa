package pebblestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
)

var quiet = Options{Logger: slog.New(slog.DiscardHandler)}

// harness is the store as the tests it shares with store/file open it.
var harness = localtest.Harness{
	Open:              localtest.Opener(Open, quiet, func(o *Options, wall func() time.Time) { o.WallClock = wall }),
	OpenOneSync:       localtest.Opener(Open, Options{Logger: quiet.Logger, OneSync: true}, func(o *Options, wall func() time.Time) { o.WallClock = wall }),
	Format1:           "v1db",
	IndexKeys:         func(t *testing.T, s store.Store) []string { return allKeys(t, s.(*Store)) },
	Records:           func(t testing.TB, s store.Store) map[string]*store.Record { return checkIndex(t, s.(*Store)) },
	FailedCallMayLand: true,
	CountExpired:      func(ctx context.Context, s store.Store) (int, error) { return s.(*Store).CountExpired(ctx) },
	// Every synced commit costs a WAL fsync when alone (Pebble counts a
	// sync just after waking its waiters, so a count may lag by one); at
	// once, the commits share them.
	Syncs:         func(t *testing.T, s store.Store) uint64 { return fsyncs(t, s.(*Store)) },
	SyncLag:       1,
	GroupShare:    4,
	GroupAttempts: 5,
	Scanned:       func(s store.Store) *int { return &s.(*Store).scanned },
	ErrLocked:     ErrLocked,
}

// openT opens the store on dir, with the tests' options changed by opts.
func openT(t testing.TB, dir string, opts ...func(*Options)) *Store {
	t.Helper()
	return localtest.OpenT(t, Open, dir, quiet, opts...)
}

// TestMain: Close must stop every engine goroutine.
func TestMain(m *testing.M) { localtest.Main(m, harness, nil) }

// TestLocal runs the tests the embedded stores share (localtest.Run):
// the conformance suite, locking, wall-clock jumps, format 1, the expiry
// index, group commit, kill -9, and kill -9 on a full disk.
func TestLocal(t *testing.T) {
	t.Parallel()
	localtest.Run(t, harness)
}

// allKeys lists every key of the engine: records, index and metadata.
func allKeys(t testing.TB, s *Store) []string {
	t.Helper()
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for ok := it.First(); ok; ok = it.Next() {
		keys = append(keys, string(it.Key()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// checkIndex verifies that every record decodes and has exactly one expiry
// index entry, at its ExpiresAt, and that no entry points elsewhere. It
// returns the records.
func checkIndex(t testing.TB, s *Store) map[string]*store.Record {
	t.Helper()
	records := map[string]*store.Record{}
	entries := map[string]time.Time{}
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		switch {
		case bytes.HasPrefix(k, recPrefix):
			h := string(k[len(recPrefix):])
			r, _, err := decodeRecord(h, it.Value())
			if err != nil {
				t.Fatal(err)
			}
			records[h] = r
		case bytes.HasPrefix(k, expPrefix):
			at, h, ok := parseExpKey(k)
			if !ok {
				t.Fatalf("bad index key %q", k)
			}
			if prev, dup := entries[h]; dup {
				t.Fatalf("record %s has two index entries: %v and %v", h, prev, at)
			}
			entries[h] = at
		case bytes.Equal(k, formatKey):
		default:
			t.Fatalf("unexpected key %q", k)
		}
	}
	for h, r := range records {
		if at, ok := entries[h]; !ok || !at.Equal(r.ExpiresAt) {
			t.Fatalf("record %s expires at %v, index says %v (present %v)", h, r.ExpiresAt, at, ok)
		}
	}
	for h := range entries {
		if records[h] == nil {
			t.Fatalf("index entry for absent record %s", h)
		}
	}
	return records
}

func TestReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	req := localtest.Reserved(t, s, "k", time.Hour)
	if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded,
		Value: []byte("v"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Get(ctx, "s", req.Record.KeyHash); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
	s = openT(t, dir)
	r, err := s.Get(ctx, "s", req.Record.KeyHash)
	if err != nil || r.State != store.Succeeded || string(r.Value) != "v" || r.Key != "k" {
		t.Fatalf("after reopen: %+v, %v", r, err)
	}
}

func TestCodec(t *testing.T) {
	t.Parallel()
	r := &store.Record{
		KeyHash: "h", Scope: "tenant ü", Key: "k\x00", Fingerprint: "fp", Binding: "b",
		State: store.Failed, Token: 1<<64 - 1, RequestID: "rid", Value: []byte{0, 1, 2},
		CreatedAt: time.Date(1600, 1, 1, 0, 0, 0, 1, time.UTC), UpdatedAt: time.Date(2026, 1, 27, 12, 0, 0, 0, time.UTC),
		ExpiresAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
	}
	m := meta{lease: 1500 * time.Millisecond, run: 1<<64 - 3}
	data := encodeRecord(r, m)
	got, gotMeta, err := decodeRecord("h", data)
	if err != nil {
		t.Fatal(err)
	}
	if gotMeta != m {
		t.Fatalf("meta: got %+v, want %+v", gotMeta, m)
	}
	if !got.CreatedAt.Equal(r.CreatedAt) || !got.ExpiresAt.Equal(r.ExpiresAt) || !got.LeaseUntil.IsZero() {
		t.Fatalf("times: %v %v %v", got.CreatedAt, got.ExpiresAt, got.LeaseUntil)
	}
	got.CreatedAt, got.UpdatedAt, got.ExpiresAt, got.LeaseUntil = r.CreatedAt, r.UpdatedAt, r.ExpiresAt, r.LeaseUntil
	if fmt.Sprint(*got) != fmt.Sprint(*r) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *got, *r)
	}
	// Every truncation, and a stray byte, is reported, never a panic.
	for i := range len(data) {
		if _, _, err := decodeRecord("h", data[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", i, err)
		}
	}
	if _, _, err := decodeRecord("h", append(data, 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: %v", err)
	}
}

func TestExpKeyOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 27, 12, 0, 0, 0, time.UTC)
	times := []time.Time{
		{}, time.Unix(-1, 0), time.Unix(-1, 5), time.Unix(0, 0), time.Unix(0, 1),
		t0, t0.Add(time.Nanosecond), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for i := 1; i < len(times); i++ {
		a, b := expKey(times[i-1], "ffff"), expKey(times[i], "0000")
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("%v sorts after %v", times[i-1], times[i])
		}
		at, h, ok := parseExpKey(b)
		if !ok || !at.Equal(times[i]) || h != "0000" {
			t.Errorf("parse %v: %v %q %v", times[i], at, h, ok)
		}
	}
}

// fsyncs returns how many WAL fsyncs the engine has done.
func fsyncs(t *testing.T, s *Store) uint64 {
	t.Helper()
	var m dto.Metric
	if err := s.db.Metrics().LogWriter.FsyncLatency.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
