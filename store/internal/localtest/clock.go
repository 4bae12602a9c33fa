package localtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

// WallClockJump: the store reads the wall clock once, at Open, and
// carries it on the monotonic clock, so a jump of the wall clock by an
// hour either way moves neither leases nor lifetimes: a live holder
// keeps its key, a short lease still runs out and a short lifetime still
// ends.
func WallClockJump(t *testing.T, h Harness) {
	ctx := context.Background()
	var offset atomic.Int64
	wall := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	s := h.OpenWall(t, t.TempDir(), wall)

	live := Leased("live", time.Minute, 2*time.Minute)
	if _, err := s.Reserve(ctx, live); err != nil {
		t.Fatal(err)
	}
	for _, jump := range []time.Duration{time.Hour, -time.Hour} {
		offset.Store(int64(jump))
		r, err := s.Get(ctx, live.Record.Scope, live.Record.KeyHash)
		if err != nil || r.Stale() || r.LeaseLeft < 30*time.Second {
			t.Fatalf("wall clock %v: the live holder's record reads %+v, %v", jump, r, err)
		}
		other := Leased("live", time.Minute, time.Hour)
		if res, err := s.Reserve(ctx, other); err != nil || res.Acquired {
			t.Fatalf("wall clock %v: a retry took a live holder's key: %+v, %v", jump, res, err)
		}
		// A lease and a lifetime that must pass still do, on time.
		key := fmt.Sprint("short", jump)
		short := Leased(key, Short, 300*time.Millisecond)
		if _, err := s.Reserve(ctx, short); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		Stale(t, s, short)
		Gone(t, s, short)
		t.Logf("wall clock %v: a lease of 30 ms ran out and a lifetime of 300 ms ended within %v", jump, time.Since(begin))
	}
}

// The kill -9 tests' child (see Main) reserves heldKey with
// heldLease, stores doneKey's outcome, says so, and waits to be killed.
const (
	heldKey   = "held"
	doneKey   = "done"
	heldLease = 2 * time.Second
)

func heldRequest(token uint64) store.ReserveRequest {
	r := Leased(heldKey, heldLease, 3*time.Hour)
	r.Record.Token = token
	return r
}

func reserveChild(h Harness, dir string) int {
	s, err := h.Open(dir, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	done := ReserveReq(doneKey, 3*time.Hour)
	if _, err := s.Reserve(ctx, heldRequest(1)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := s.Reserve(ctx, done); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := s.Complete(ctx, store.Completion{Fence: FenceOf(done), State: store.Succeeded, Value: []byte("42"), TTL: 3 * time.Hour}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// killedHolder runs the child on dir and kills it with SIGKILL once it
// holds heldKey.
func killedHolder(t *testing.T, dir string) {
	t.Helper()
	cmd := ChildCommand("reserve", dir, 0)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// RestartClockJump: a holder is killed (SIGKILL) holding a key with
// a lease of 2 s, and the store reopens with the wall clock an hour back,
// or an hour ahead. The dead holder's key is free again within two leases
// of the reopen (an hour back, its record's LeaseUntil is an hour and
// more ahead of the new clock; its lease is held to its length from the
// reopen), and the stored outcome still replays.
func RestartClockJump(t *testing.T, h Harness) {
	for _, jump := range []time.Duration{-time.Hour, time.Hour} {
		t.Run(fmt.Sprint(jump), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			killedHolder(t, dir)
			ctx := context.Background()
			begin := time.Now()
			s := h.OpenWall(t, dir, func() time.Time { return time.Now().Add(jump) })
			r, err := s.Get(ctx, "s", store.HashKey("s", heldKey))
			if err != nil || r.State != store.InProgress || r.LeaseLeft > heldLease {
				t.Fatalf("the dead holder's record after the reopen: %+v, %v; want in progress, at most %v of lease left", r, err, heldLease)
			}
			done := ReserveReq(doneKey, time.Hour)
			if res, err := s.Reserve(ctx, done); err != nil || res.Acquired || res.Existing.State != store.Succeeded || string(res.Existing.Value) != "42" {
				t.Fatalf("the stored outcome after the reopen: %+v, %v", res, err)
			}
			var took time.Duration
			Eventually(t, "the dead holder's key is taken over", func() bool {
				res, err := s.Reserve(ctx, heldRequest(2))
				if err != nil {
					t.Fatal(err)
				}
				took = time.Since(begin)
				return res.Acquired && res.TookOver
			})
			t.Logf("wall clock %v across the restart: the dead holder's key (lease %v) taken over %v after the reopen began", jump, heldLease, took)
			if took > 2*heldLease {
				t.Fatalf("the dead holder's key was blocked %v after the reopen, more than two leases", took)
			}
		})
	}
}

// ReadsFormat1 opens a store written before it kept its own clock
// (testdata/<Format1>, see store/file/testdata/README.md: records written
// with the times of a clock in 2099, record format 1, no lease field):
// completed, expired, released and in-progress records read as they were
// written, the in-progress ones with their lease held to at most its
// length from the reopen, and the store takes new writes and reads them
// back after another reopen.
func ReadsFormat1(t *testing.T, h Harness) {
	dir := t.TempDir()
	files, err := os.ReadDir(filepath.Join("testdata", h.Format1))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("testdata", h.Format1, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	s := h.OpenT(t, dir)
	get := func(key string) (store.Record, error) { return s.Get(ctx, "s", store.HashKey("s", key)) }
	if r, err := get("done"); err != nil || r.State != store.Succeeded || string(r.Value) != "the answer" ||
		!r.ExpiresAt.Equal(time.Date(2099, 1, 2, 0, 0, 0, 0, time.UTC)) || r.Token != 3 {
		t.Fatalf("done: %+v, %v", r, err)
	}
	for _, key := range []string{"gone", "old"} {
		if r, err := get(key); err == nil {
			t.Fatalf("%s (released, or expired in 2001) reads %+v", key, r)
		}
	}
	// held was reserved with a lease of 1 s, renewed with 2 s past its
	// reservation (format 1 reads that as a lease of 2 s).
	for key, lease := range map[string]time.Duration{"held": time.Second, "renewed": 2 * time.Second} {
		r, err := get(key)
		if err != nil || r.State != store.InProgress || r.Fingerprint != "fp-"+key || r.LeaseLeft > lease {
			t.Fatalf("%s: %+v, %v; want in progress with at most %v of lease left", key, r, err, lease)
		}
	}
	take := Leased("held", time.Minute, time.Hour)
	take.Record.Fingerprint = "fp-held"
	Eventually(t, "the format-1 holder's key is taken over", func() bool {
		res, err := s.Reserve(ctx, take)
		if err != nil {
			t.Fatal(err)
		}
		return res.Acquired && res.TookOver
	})
	Complete(t, s, take, "new", time.Hour)
	s.Close()
	s = h.OpenT(t, dir)
	recs := h.Records(t, s)
	if r := recs[store.HashKey("s", "held")]; r == nil || string(r.Value) != "new" {
		t.Fatalf("after a write and a reopen, held reads %+v", r)
	}
	if r := recs[store.HashKey("s", "done")]; r == nil || string(r.Value) != "the answer" {
		t.Fatalf("after a write and a reopen, done reads %+v", r)
	}
}
