package file

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/localtest"
)

// snapRequest is the request of key in the snapshot crash test: a lease
// of a minute, and a TTL of an hour or, for one key in four, 300 ms, so
// that records expire, Cleanup drops and compacts segments, and
// snapshots see keys come and go.
func snapRequest(key string) store.ReserveRequest {
	ttl := time.Hour
	if strings.HasSuffix(key, "3") || strings.HasPrefix(key, "rot") && strings.ContainsAny(key[len(key)-1:], "124") {
		// In the rotation mode's rounds ("rot..."), four keys in ten: the
		// log soon holds more than twice its live data, and rotations
		// compact it.
		ttl = 300 * time.Millisecond
	}
	req := localtest.Leased(key, time.Minute, ttl)
	if strings.HasSuffix(key, "7") {
		// on_stale: conflict: with OneSync too, its reservation is
		// synced before Reserve returns.
		req.TakeOverStale = false
	}
	req.Record.Token = localtest.TokenOf(key)
	return req
}

// snapChild writes keys round-i from four goroutines (one in five is
// released rather than completed) while a fifth runs Cleanup and writes
// an index snapshot, over and over (unless IDEM_FILE_TEST_MODE is
// "rotation": then the log's rotations do that work), until it is killed. It reports on
// stdout, once each call has returned: "R key" (reserved), "A key"
// (completed), "D key" (released).
func snapChild(dir, round string) int {
	s, err := Open(dir, Options{Logger: quiet.Logger, SegmentBytes: 16 << 10, OneSync: os.Getenv("IDEM_FILE_TEST_MODE") == "onesync"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	out := make(chan string, 1024)
	go func() {
		w := bufio.NewWriter(os.Stdout)
		for l := range out {
			w.WriteString(l + "\n")
			if len(out) == 0 {
				w.Flush()
			}
		}
	}()
	go func() {
		if os.Getenv("IDEM_FILE_TEST_MODE") == "rotation" {
			return // the log's rotations alone sweep, compact and snapshot
		}
		for {
			if _, err := s.Cleanup(ctx, 0); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			if err := s.snapshot(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i += 4 {
				key := fmt.Sprintf("%s-%d", round, i)
				req := snapRequest(key)
				if res, err := s.Reserve(ctx, req); err != nil || !res.Acquired {
					fmt.Fprintln(os.Stderr, key, res, err)
					os.Exit(1)
				}
				out <- "R " + key
				if i%5 == 0 {
					if err := s.Release(ctx, localtest.FenceOf(req)); err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
					out <- "D " + key
					continue
				}
				if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(req), State: store.Succeeded,
					Value: localtest.Response(key), TTL: req.TTL}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				out <- "A " + key
			}
		}()
	}
	wg.Wait()
	return 0
}

// copyDir copies the files of dir (the store's, closed or killed) to a
// new directory.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, de.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// sameRecords reports how a and b differ, "" if they hold the same
// records. Records of short TTLs are left out: a full replay brings back
// the expired records whose frames are still in the log, which the
// snapshot no longer has (both read as absent).
func sameRecords(a, b map[string]*store.Record) string {
	for _, m := range []map[string]*store.Record{a, b} {
		for k, r := range m {
			if r.ExpiresIn() < 10*time.Minute {
				delete(m, k)
			}
		}
	}
	for k, ra := range a {
		rb := b[k]
		if rb == nil {
			return fmt.Sprintf("%s only in the first", k)
		}
		if ra.State != rb.State || ra.Token != rb.Token || !bytes.Equal(ra.Value, rb.Value) ||
			!ra.ExpiresAt.Equal(rb.ExpiresAt) || !ra.LeaseUntil.Equal(rb.LeaseUntil) || ra.Fingerprint != rb.Fingerprint {
			return fmt.Sprintf("%s: %+v against %+v", k, *ra, *rb)
		}
	}
	for k := range b {
		if a[k] == nil {
			return fmt.Sprintf("%s only in the second", k)
		}
	}
	return ""
}

// TestSnapshotCrash kills (SIGKILL) a child that writes, runs Cleanup
// (so segments are dropped and compacted) and writes index snapshots
// continuously, at random moments: during a snapshot's write, its rename,
// a compaction's copies, a drop. After each kill, the store opens, from
// the snapshot when one checks, and every acknowledged key is there:
// completed keys with their outcome, released keys gone. A copy of the
// directory opened without the snapshot (the whole log replayed) holds
// exactly the same records.
func TestSnapshotCrash(t *testing.T) {
	t.Parallel()
	snapCrash(t, "cleanup")
}

// snapCrash runs the kills of TestSnapshotCrash on a child that runs
// Cleanup and snapshots continuously (mode "cleanup", and "onesync",
// whose store is opened with OneSync) or leaves that work to the log's
// rotations ("rotation").
func snapCrash(t *testing.T, mode string) {
	dir := t.TempDir()
	ctx := context.Background()
	rounds := 16
	if mode == "onesync" && os.Getenv("IDEM_LONG") != "" {
		rounds = 80 // make crash
	}
	acked := map[string]byte{} // key -> last step reported
	fromSnap, tornTemp, standing := 0, 0, 0
	for round := range rounds {
		cmd := localtest.ChildCommand("snap", dir, round)
		if mode == "rotation" {
			// The last of a repeated variable wins: the rounds' keys
			// tell the rotation mode's rounds from the others.
			cmd.Env = append(cmd.Env, fmt.Sprint("IDEM_FILE_TEST_ROUND=rot", round))
		}
		cmd.Env = append(cmd.Env, "IDEM_FILE_TEST_MODE="+mode)
		stdout, stderr := testkit.Start(t, cmd)
		var lines []string
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
		}()
		time.Sleep(200*time.Millisecond + rand.N(600*time.Millisecond))
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-done
		if err := cmd.Wait(); err != nil && !strings.Contains(err.Error(), "killed") {
			t.Fatalf("round %d: child: %v\n%s", round, err, stderr.String())
		}
		for _, l := range lines {
			step, key, _ := strings.Cut(l, " ")
			acked[key] = max(acked[key], step[0]) // 'A', 'D' > 'R'
		}
		if _, err := os.Stat(filepath.Join(dir, snapshotTemp)); err == nil {
			tornTemp++
		}
		full := copyDir(t, dir)
		if err := os.Remove(filepath.Join(full, snapshotFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}

		s := openT(t, dir)
		if s.snapFirst.Load() > 0 {
			fromSnap++
		}
		recs := checkIndex(t, s)
		for key, step := range acked {
			req := snapRequest(key)
			if req.TTL < time.Hour {
				continue // may have expired
			}
			r := recs[req.Record.KeyHash]
			switch step {
			case 'A':
				if r == nil || r.State != store.Succeeded || !bytes.Equal(r.Value, localtest.Response(key)) {
					t.Fatalf("round %d: completed key %s: %+v", round, key, r)
				}
			case 'D':
				if r != nil {
					t.Fatalf("round %d: released key %s came back: %+v", round, key, r)
				}
			case 'R':
				// Gone only if released (keys ending in 0 or 5) before
				// the child could say so, or, with OneSync, if its
				// reservation could be taken over (all but keys ending in
				// 7) and no sync covered it before the kill.
				if r == nil && !strings.HasSuffix(key, "0") && !strings.HasSuffix(key, "5") &&
					(mode != "onesync" || strings.HasSuffix(key, "7")) {
					t.Fatalf("round %d: reserved key %s is gone", round, key)
				}
				if r != nil && r.State == store.InProgress && r.Token == req.Record.Token {
					standing++
				}
			}
			if r != nil && r.Token != req.Record.Token {
				t.Fatalf("round %d: key %s holds another token: %+v", round, key, r)
			}
		}
		if _, err := s.Get(ctx, "", store.HashKey("x", "y")); !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Opened once s is closed: each holds a file open per segment,
		// and the long run's segments (16 KiB, a response each) pass
		// half of a common limit of 20,000 open files.
		s2 := openT(t, full)
		if s2.snapFirst.Load() != 0 {
			t.Fatal("the copy without a snapshot opened from one")
		}
		if d := sameRecords(recs, checkIndex(t, s2)); d != "" {
			t.Fatalf("round %d: from the snapshot and from the whole log differ: %s", round, d)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d lines; %d keys in all", round, len(lines), len(acked))
	}
	t.Logf("%d of %d opens from a snapshot; %d kills left a snapshot being written; %d checks of keys reserved and not completed found them in progress",
		fromSnap, rounds, tornTemp, standing)
	if fromSnap == 0 {
		t.Fatal("no open read a snapshot: the test tested little")
	}
}

// TestSnapshotIgnoredWhenDamaged: a snapshot cut short, or with a byte
// changed, is ignored, and Open replays the whole log to the same
// records.
func TestSnapshotIgnoredWhenDamaged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(dir, Options{Logger: quiet.Logger, SegmentBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		req := localtest.ReserveReq(fmt.Sprint(i), time.Hour)
		if _, err := s.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			localtest.Complete(t, s, req, fmt.Sprint("v", i), time.Hour)
		}
	}
	want := checkIndex(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	snap, err := os.ReadFile(filepath.Join(dir, snapshotFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, damage := range []string{"whole", "cut", "flip", "flip header", "trailing", "an entry twice"} {
		d := copyDir(t, dir)
		b := bytes.Clone(snap)
		switch damage {
		case "cut":
			b = b[:len(b)-20]
		case "flip":
			b[len(b)/2] ^= 1
		case "flip header":
			b[12] ^= 1
		case "trailing":
			b = append(b, 0)
		case "an entry twice":
			// The second entry is the first again, under checksums that
			// agree: the snapshot checks, but cannot be loaded.
			from := 36 + 16*int(binary.BigEndian.Uint32(b[24:]))
			entries := b[from : len(b)-8]
			copy(entries[snapEntry:2*snapEntry], entries[:snapEntry])
			binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(entries, castagnoli))
		}
		if err := os.WriteFile(filepath.Join(d, snapshotFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s := openT(t, d)
		if got := s.snapFirst.Load() != 0; got != (damage == "whole") {
			t.Fatalf("%s: opened from the snapshot: %v", damage, got)
		}
		if diff := sameRecords(want, checkIndex(t, s)); diff != "" {
			t.Fatalf("%s: %s", damage, diff)
		}
	}
}

// TestTagCollision: two key hashes that share the index's first 12 bytes
// (about one chance in 10^15 among ten million keys) are never answered
// for each other: the frame's whole hash is checked, and the call fails.
func TestTagCollision(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir())
	ctx := context.Background()
	a := localtest.Reserved(t, s, "a", time.Hour)
	b := localtest.ReserveReq("b", time.Hour)
	b.Record.KeyHash = a.Record.KeyHash[:24] + strings.Repeat("0", 40)
	if _, err := s.Get(ctx, "", b.Record.KeyHash); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a colliding key: %v, want ErrCorrupt", err)
	}
	if res, err := s.Reserve(ctx, b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Reserve of a colliding key: %+v %v, want ErrCorrupt", res, err)
	}
	if err := s.Complete(ctx, store.Completion{Fence: localtest.FenceOf(b), State: store.Succeeded, TTL: time.Hour}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Complete of a colliding key: %v, want ErrCorrupt", err)
	}
	if r, err := s.Get(ctx, "", a.Record.KeyHash); err != nil || r.State != store.InProgress {
		t.Fatalf("the first key after: %+v %v", r, err)
	}
}

// TestSnapshotBoundsLease: a record in progress when the store closed,
// whose lease ends an hour ahead of the reopened store's clock (the wall
// clock was stepped back), is loaded from the snapshot with its lease
// held to its length from the reopen, as a replay holds it.
func TestSnapshotBoundsLease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	s, err := Open(dir, Options{Logger: quiet.Logger, WallClock: ahead, SegmentBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	req := localtest.Leased("held", 2*time.Second, 24*time.Hour)
	if _, err := s.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, localtest.FenceOf(req), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	// Then enough records that the holder's frame is in a sealed
	// segment, which the snapshot covers.
	for i := range 100 {
		if _, err := s.Reserve(ctx, localtest.ReserveReq(fmt.Sprint(i), time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	id := mustID(t, req.Record.KeyHash)
	if _, e := lookup(&s.stripes[stripeOf(id)], &id); e.seg == uint32(s.log.active.id) {
		t.Fatal("the holder's frame is in the active segment")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, func(o *Options) { o.SegmentBytes = 4 << 10 })
	if s.snapFirst.Load() == 0 {
		t.Fatal("the store did not open from its snapshot")
	}
	r, err := s.Get(ctx, "", req.Record.KeyHash)
	if err != nil || r.State != store.InProgress || r.LeaseLeft > 3*time.Second {
		t.Fatalf("after the reopen: %+v %v; want in progress with at most 3s of lease left", r, err)
	}
}

// TestSnapshotOnRotation: with no Cleanup and no Close (a process killed
// under load), the log's rotations write snapshots, so that a restart
// reads only the log written since the last.
func TestSnapshotOnRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s := openT(t, dir, func(o *Options) { o.SegmentBytes = 4 << 10 })
	i := 0
	localtest.Eventually(t, "a snapshot written on a rotation", func() bool {
		for range 20 {
			req := localtest.ReserveReq(fmt.Sprint(i), time.Hour)
			i++
			if _, err := s.Reserve(ctx, req); err != nil {
				t.Fatal(err)
			}
			localtest.Complete(t, s, req, "v", time.Hour)
		}
		return s.snapFirst.Load() > 0
	})
	// Opened from a copy, as a kill would leave it: the snapshot loads.
	s.snapMu.Lock()
	d := copyDir(t, dir)
	s.snapMu.Unlock()
	o := openT(t, d, func(o *Options) { o.SegmentBytes = 4 << 10 })
	if o.snapFirst.Load() == 0 {
		t.Fatal("the copy did not open from the snapshot")
	}
	if recs := checkIndex(t, o); len(recs) != i {
		t.Fatalf("%d records from the copy, want %d", len(recs), i)
	}
}
