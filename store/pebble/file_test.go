package pebblestore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// childEnv makes the test binary act as a lock holder instead of running
// the tests; see TestMain. (storetest.CrashChild makes it a crash victim.)
const childEnv = "IDEM_FILE_TEST_CHILD"

func TestMain(m *testing.M) {
	storetest.CrashChild(openCrash)
	switch os.Getenv(childEnv) {
	case "":
		testkit.VerifyTestMain(m) // Close must stop every engine goroutine
	case "hold":
		os.Exit(holdChild(os.Getenv("IDEM_FILE_TEST_DIR")))
	case "reserve":
		os.Exit(reserveChild(os.Getenv("IDEM_FILE_TEST_DIR")))
	case "fill":
		os.Exit(fullChild(os.Getenv("IDEM_FILE_TEST_DIR"), os.Getenv("IDEM_FILE_TEST_ROUND")))
	default:
		fmt.Fprintf(os.Stderr, "unknown %s\n", childEnv)
		os.Exit(2)
	}
}

var quiet = Options{Logger: slog.New(slog.DiscardHandler)}

func openT(t testing.TB, dir string) *Store { return openWith(t, dir) }

func openWith(t testing.TB, dir string, opts ...func(*Options)) *Store {
	t.Helper()
	o := quiet
	for _, f := range opts {
		f(&o)
	}
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		New:       func(t *testing.T) store.Store { return openT(t, t.TempDir()) },
		IndexKeys: func(t *testing.T, s store.Store) []string { return allKeys(t, s.(*Store)) },
	})
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

var tokens atomic.Uint64

// reserveReq reserves key with a lease of a minute (it never runs out
// during a test) and a lifetime of ttl, on a token of its own.
func reserveReq(key string, ttl time.Duration) store.ReserveRequest {
	return store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("s", key), Scope: "s", Key: key,
			Fingerprint: "fp", Binding: "POST /x", State: store.InProgress,
			Token: tokens.Add(1), RequestID: "req-" + key,
		},
		Lease: time.Minute, TTL: ttl, TakeOverStale: true,
	}
}

// leased is reserveReq with the lease lease.
func leased(key string, lease, ttl time.Duration) store.ReserveRequest {
	r := reserveReq(key, ttl)
	r.Lease = lease
	return r
}

func fenceOf(req store.ReserveRequest) store.Fence {
	return store.Fence{KeyHash: req.Record.KeyHash, Scope: req.Record.Scope, Token: req.Record.Token}
}

// short is a lease or lifetime that a test waits out.
const short = 30 * time.Millisecond

// eventually polls cond until it holds, failing the test after a
// deadline generous enough for a loaded machine.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gone waits until the record of req has expired.
func gone(t testing.TB, s *Store, req store.ReserveRequest) {
	t.Helper()
	eventually(t, "record "+req.Record.Key+" expires", func() bool {
		_, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
		return errors.Is(err, store.ErrNotFound)
	})
}

// stale waits until the record of req is stale.
func stale(t testing.TB, s *Store, req store.ReserveRequest) {
	t.Helper()
	eventually(t, "lease of "+req.Record.Key+" runs out", func() bool {
		r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
		return err == nil && r.Stale()
	})
}

// TestIndexConsistent runs every kind of write, including the ones that
// move or drop a record's expiry, and checks the index after each.
func TestIndexConsistent(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir())
	ctx := context.Background()
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		checkIndex(t, s)
	}
	a := reserveReq("a", time.Hour)
	_, err := s.Reserve(ctx, a)
	step("reserve a", err)
	step("renew a", s.Renew(ctx, fenceOf(a), 2*time.Minute))
	step("complete a", s.Complete(ctx, store.Completion{Fence: fenceOf(a), State: store.Succeeded,
		Value: []byte("A"), TTL: 24 * time.Hour}))
	b := leased("b", short, time.Hour)
	_, err = s.Reserve(ctx, b)
	step("reserve b", err)
	stale(t, s, b)
	take := reserveReq("b", short) // b's lease is over
	res, err := s.Reserve(ctx, take)
	step("take over b", err)
	if !res.TookOver {
		t.Fatalf("no takeover: %+v", res)
	}
	gone(t, s, take)
	again := reserveReq("b", time.Hour) // b expired
	res, err = s.Reserve(ctx, again)
	step("replace expired b", err)
	if !res.Acquired || res.TookOver {
		t.Fatalf("replacing an expired record: %+v", res)
	}
	step("release b", s.Release(ctx, fenceOf(again)))
	c := reserveReq("c", short)
	_, err = s.Reserve(ctx, c)
	step("reserve c", err)
	gone(t, s, c)
	n, err := s.Cleanup(ctx, 0)
	step("cleanup", err)
	if n != 1 {
		t.Fatalf("cleanup removed %d, want 1 (c)", n)
	}
	if recs := checkIndex(t, s); len(recs) != 1 || recs[a.Record.KeyHash] == nil {
		t.Fatalf("left %d records, want a alone", len(recs))
	}
}

// TestCleanupReadsOnlyDue checks that Cleanup reads the expiry index
// entries that are due and no others, however many records are live.
func TestCleanupReadsOnlyDue(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir())
	ctx := context.Background()
	var last store.ReserveRequest
	for i := range 2000 {
		ttl := 48 * time.Hour
		if i%100 == 0 {
			ttl = short
		}
		req := reserveReq(fmt.Sprint(i), ttl)
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
		if ttl == short {
			last = req
		}
	}
	gone(t, s, last)
	n, err := s.Cleanup(ctx, 0)
	if err != nil || n != 20 {
		t.Fatalf("Cleanup: %d, %v; want 20", n, err)
	}
	if s.scanned != 20 {
		t.Fatalf("Cleanup read %d index entries for 20 expired records", s.scanned)
	}
	if recs := checkIndex(t, s); len(recs) != 1980 {
		t.Fatalf("%d records left, want 1980", len(recs))
	}
	// In chunks under a limit, the same.
	for i := range 600 {
		last = reserveReq(fmt.Sprint("b", i), short)
		if _, err := s.Reserve(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	gone(t, s, last)
	s.scanned = 0
	total := 0
	for {
		n, err := s.Cleanup(ctx, 500)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != 600 || s.scanned != 600 {
		t.Fatalf("Cleanup with limit 500 removed %d and read %d entries, want 600 and 600", total, s.scanned)
	}
}

func TestReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	req := reserveReq("k", time.Hour)
	if _, err := s.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, store.Completion{Fence: fenceOf(req), State: store.Succeeded,
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

// TestLocked opens a directory that another process holds.
func TestLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// In this process: a second Store on the same directory is refused.
	s := openT(t, dir)
	if _, err := Open(dir, quiet); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open in one process: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// In another process.
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=hold", "IDEM_FILE_TEST_DIR="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // the child holds the store until it closes
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "open\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	_, err = Open(dir, quiet)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open of a directory another process holds: %v, want ErrLocked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "another process") {
		t.Fatalf("message %q does not name the directory and the other process", msg)
	}
	// The kernel drops the lock when the holder dies, even by SIGKILL.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	openT(t, dir)
}

// holdChild opens dir, says so, and holds it until stdin closes.
func holdChild(dir string) int {
	s, err := Open(dir, quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	fmt.Println("open")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestGroupCommit runs 64 reserve+complete pairs one after another, then
// 64 at once. Every synced commit costs a WAL fsync when alone; at once,
// the commits share them.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir())
	ctx := context.Background()
	pair := func(key string) error {
		req := reserveReq(key, time.Hour)
		if _, err := s.Reserve(ctx, req); err != nil {
			return err
		}
		return s.Complete(ctx, store.Completion{Fence: fenceOf(req), State: store.Succeeded,
			Value: []byte(key), TTL: time.Hour})
	}
	const n = 64
	syncs0, begin := fsyncs(t, s), time.Now()
	for i := range n {
		if err := pair(fmt.Sprint("seq-", i)); err != nil {
			t.Fatal(err)
		}
	}
	seqTime, seqSyncs := time.Since(begin), fsyncs(t, s)-syncs0

	// The racers overlap only if the scheduler lets them: on a loaded
	// machine with two cores it may run them one after another, and then
	// no group forms. Up to five attempts give them the chance to overlap.
	var concTime time.Duration
	var concSyncs uint64
	for attempt := range 5 {
		errs := make(chan error, n)
		syncs0, begin = fsyncs(t, s), time.Now()
		testkit.FanOut(n, func(i int) { errs <- pair(fmt.Sprint("conc-", attempt, "-", i)) })
		concTime, concSyncs = time.Since(begin), fsyncs(t, s)-syncs0
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		// The times are for the reader (the machine may be shared); the
		// fsync counts are what group commit promises, and are asserted.
		t.Logf("sequential: %v, %d fsyncs; concurrent (attempt %d): %v, %d fsyncs", seqTime, seqSyncs, attempt+1, concTime, concSyncs)
		if concSyncs*4 <= 2*n {
			break
		}
	}
	// Durable: each lone commit waited for its own fsync. (Pebble counts a
	// sync just after waking its waiters, so a count may lag by one.)
	if seqSyncs < 2*n-1 {
		t.Errorf("%d sequential pairs took %d fsyncs, want %d", n, seqSyncs, 2*n)
	}
	if concSyncs*4 > 2*n {
		t.Errorf("%d concurrent pairs took %d fsyncs, want at most %d", n, concSyncs, 2*n/4)
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

func TestCountExpired(t *testing.T) {
	t.Parallel()
	s, err := Open(t.TempDir(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var last store.ReserveRequest
	for i := range 30 {
		req := benchRequest(99, uint64(i))
		req.TTL = time.Hour
		if i <= 10 {
			req.TTL = short
			last = req
		}
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	gone(t, s, last)
	n, err := s.CountExpired(ctx)
	if err != nil || n != 11 {
		t.Fatalf("CountExpired = %d, %v; want 11", n, err)
	}
	if removed, _ := s.Cleanup(ctx, 0); removed != n {
		t.Fatalf("Cleanup removed %d, CountExpired said %d", removed, n)
	}
}
