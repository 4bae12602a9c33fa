package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/tmpdisk"
)

// countingUpstream is a real HTTP server over TCP that answers keyed POSTs
// with a body of 10 to 50 KiB (1 KiB on /small) and counts how many times
// each Idempotency-Key ran. A second run of a key answers other bytes, so
// a replay that came from a second run shows.
type countingUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	runs map[string]int
}

func newCountingUpstream(t *testing.T) *countingUpstream {
	u := &countingUpstream{runs: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.runs[key]++
		run := u.runs[key]
		u.mu.Unlock()
		h := fnv.New32a()
		h.Write([]byte(key))
		size := 10<<10 + int(h.Sum32()%(40<<10))
		if r.URL.Path == "/small" {
			size = 1 << 10
		}
		pad := make([]byte, size/2)
		for i := range pad {
			pad[i] = byte(rand.IntN(256))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"run":%d,"pad":"%x"}`, key, run, pad)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *countingUpstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[key]
}

// diskCall is one call of the full-disk test and how long it took.
type diskCall struct {
	response
	took time.Duration
}

// kind names what a gateway answer says: "acked" (a 2xx run for this
// call), "replayed" (a 2xx replay), "full" (503: no space to record new
// calls), "kept" (503 outcome_not_recorded, kept by this server),
// "not_recorded" (503 outcome_not_recorded, not kept), or "other".
func (c diskCall) kind() string {
	var p struct {
		Type, Detail string
	}
	if c.Header.Get("Content-Type") == "application/problem+json" {
		_ = json.Unmarshal(c.Body, &p)
	}
	switch {
	case c.Status/100 == 2 && c.Header.Get("Idempotent-Replayed") == "true":
		return "replayed"
	case c.Status/100 == 2:
		return "acked"
	case c.Status == 503 && strings.HasSuffix(p.Type, "store_unavailable") && strings.Contains(p.Detail, "no space left"):
		return "full"
	case c.Status == 503 && strings.HasSuffix(p.Type, "outcome_not_recorded") && strings.Contains(p.Detail, "this server keeps it"):
		return "kept"
	case c.Status == 503 && strings.HasSuffix(p.Type, "outcome_not_recorded"):
		return "not_recorded"
	}
	return "other"
}

func (c diskCall) String() string {
	return fmt.Sprintf("%d %s (%v) %.300s", c.Status, c.Header.Get("Content-Type"), c.took, c.Body)
}

func diskSend(t *testing.T, g *gw, path, key string) diskCall {
	t.Helper()
	c, err := diskTry(g, path, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// diskTry is diskSend for another goroutine than the test's.
func diskTry(g *gw, path, key string) (diskCall, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	r, err := tryPost(ctx, g.URL+path, `{"amount": 1}`, "Idempotency-Key", key)
	if err != nil {
		return diskCall{}, fmt.Errorf("POST %s key %s: %w", path, key, err)
	}
	return diskCall{r, time.Since(began)}, nil
}

func adminGet(t *testing.T, g *gw, path string) (int, string) {
	t.Helper()
	res, err := client.Get(g.Admin + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// diskState is what the full-disk test knows across gateways: the body of
// every acknowledged key, and the keys whose outcome a gateway kept in
// memory only.
type diskState struct {
	t     *testing.T
	up    *countingUpstream
	acked map[string][]byte
	// kept keys, by the gateway that kept them; those of a gateway that
	// was stopped or killed before the disk freed may run again once
	// their lease ends (the lease rule).
	kept map[string]bool
	// rerun holds the keys kept by a gateway that was gone before room
	// came back and that ran again after their lease: the second run is
	// the first acknowledged one.
	rerun map[string]bool
}

// fill sends distinct keys from four clients until the store reports
// full, and sorts the answers.
func (s *diskState) fill(g *gw, prefix string) (acked, kept []string) {
	t := s.t
	t.Helper()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		full   atomic.Int32
		counts = map[string]int{}
	)
	deadline := time.Now().Add(40 * time.Second)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; full.Load() < 8 && time.Now().Before(deadline); i++ {
				key := fmt.Sprintf("%s-%d-%d", prefix, c, i)
				r, err := diskTry(g, "/work", key)
				if err != nil {
					t.Error(err)
					return
				}
				k := r.kind()
				mu.Lock()
				counts[k]++
				switch k {
				case "acked":
					s.acked[key] = r.Body
					acked = append(acked, key)
				case "kept":
					s.kept[key] = true
					kept = append(kept, key)
				case "full":
					full.Add(1)
				case "not_recorded":
					// Ran, maybe, and not kept: only the lease rule
					// applies. Not expected while the keeper has room.
					t.Errorf("key %s: outcome neither recorded nor kept: %v", key, r)
				default:
					t.Errorf("key %s while filling the disk: %v", key, r)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if full.Load() == 0 {
		t.Fatalf("%s: the store never reported full within 40 s: %v", prefix, counts)
	}
	t.Logf("%s: filled the disk: %v", prefix, counts)
	return acked, kept
}

// whileFull checks a gateway on a full disk: new keys are refused at once
// with 503 and Retry-After and run nothing, every acknowledged key
// replays byte for byte, /readyz says not writable and /healthz is fine.
//
// The room a stopped process had taken ahead of its log may be free
// again in a gateway just reopened on the full disk: the first new keys
// may be recorded (none may be kept: the store admits a key only with
// room for its outcome). Those kept are returned.
func (s *diskState) whileFull(g *gw, prefix string) (kept []string) {
	t := s.t
	t.Helper()
	acked := 0
	for i := 0; ; i++ {
		key := fmt.Sprintf("%s-first-%d", prefix, i)
		r := diskSend(t, g, "/work", key)
		switch r.kind() {
		case "acked":
			s.acked[key] = r.Body
			acked++
		case "kept":
			s.kept[key] = true
			kept = append(kept, key)
		case "full":
		default:
			t.Fatalf("new key %s on the full disk: %v", key, r)
		}
		if r.kind() == "full" {
			break
		}
		if i == 100 {
			t.Fatalf("%s: 100 new keys and the store is not full", prefix)
		}
	}
	if acked+len(kept) > 0 {
		t.Logf("%s: %d new keys recorded and %d reserved then kept in the room left before the store found the disk full",
			prefix, acked, len(kept))
	}
	var took []time.Duration
	for i := range 20 {
		key := fmt.Sprintf("%s-new-%d", prefix, i)
		r := diskSend(t, g, "/work", key)
		if r.kind() != "full" {
			t.Fatalf("new key %s on the full disk: %v", key, r)
		}
		r.problem(t)
		if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra <= 0 {
			t.Errorf("new key %s on the full disk: Retry-After %q", key, r.Header.Get("Retry-After"))
		}
		// A generous bound: the refusal comes from the store's state, not
		// from a write that waits for room.
		if r.took >= 2*time.Second {
			t.Errorf("new key %s on the full disk was refused after %v", key, r.took)
		}
		if n := s.up.count(key); n != 0 {
			t.Errorf("new key %s refused on the full disk ran %d times upstream", key, n)
		}
		took = append(took, r.took)
	}
	slices.Sort(took)
	t.Logf("%s: 20 new keys refused on the full disk in %v (median), %v (slowest)", prefix, took[len(took)/2], took[len(took)-1])
	s.replayAll(g, prefix)
	if code, body := adminGet(t, g, "/readyz"); code != 503 || !strings.Contains(body, "not writable") {
		t.Errorf("/readyz on the full disk: %d %s", code, body)
	}
	if code, body := adminGet(t, g, "/healthz"); code != 200 {
		t.Errorf("/healthz on the full disk: %d %s", code, body)
	}
	return kept
}

// replayAll checks that every acknowledged key replays byte for byte and
// ran once upstream.
func (s *diskState) replayAll(g *gw, when string) {
	t := s.t
	t.Helper()
	for key, body := range s.acked {
		r := diskSend(t, g, "/work", key)
		if r.kind() != "replayed" || !bytes.Equal(r.Body, body) {
			t.Errorf("%s: acknowledged key %s: %v, want its first body replayed", when, key, r)
		}
		if n := s.up.count(key); n != 1 && !(s.rerun[key] && n == 2) {
			t.Errorf("%s: acknowledged key %s ran %d times upstream", when, key, n)
		}
	}
}

// retryKept retries keys whose outcome the live gateway g keeps: none runs
// again. It returns the answers, which replay the kept outcome.
func (s *diskState) retryKept(g *gw, keys []string, when string) map[string][]byte {
	t := s.t
	t.Helper()
	got := map[string][]byte{}
	kinds := map[string]int{}
	for _, key := range keys {
		r := diskSend(t, g, "/work", key)
		kinds[r.kind()]++
		if n := s.up.count(key); n != 1 {
			t.Errorf("%s: kept key %s ran %d times upstream after a retry on the gateway that keeps it", when, key, n)
		}
		switch r.kind() {
		case "replayed":
			got[key] = r.Body
		case "kept":
		default:
			t.Errorf("%s: kept key %s retried on the gateway that keeps it: %v", when, key, r)
		}
	}
	t.Logf("%s: %d kept keys retried on the gateway that keeps them: %v", when, len(keys), kinds)
	return got
}

// recover frees the disk by removing ballast and waits until g records new
// calls again, without a restart.
func (s *diskState) recover(g *gw, ballast, prefix string) {
	t := s.t
	t.Helper()
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	deadline := freed.Add(30 * time.Second)
	for i := 0; ; i++ {
		key := fmt.Sprintf("%s-back-%d", prefix, i)
		r := diskSend(t, g, "/work", key)
		if r.kind() == "acked" {
			s.acked[key] = r.Body
			break
		}
		if r.kind() != "full" {
			t.Fatalf("new key %s after the disk freed: %v", key, r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no new key recorded within 30 s of freeing the disk", prefix)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: a new key was recorded %v after the disk freed", prefix, time.Since(freed))
	for i := range 10 {
		key := fmt.Sprintf("%s-more-%d", prefix, i)
		r := diskSend(t, g, "/work", key)
		if r.kind() != "acked" {
			t.Fatalf("new key %s with room again: %v", key, r)
		}
		s.acked[key] = r.Body
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		code, body := adminGet(t, g, "/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with room again: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writtenKept waits until every key kept by the live gateway g replays
// from the store: the keeper wrote it once the disk had room. Each is
// then an acknowledged key (with the body the keeper answered, if any).
func (s *diskState) writtenKept(g *gw, keys []string, answered map[string][]byte, when string) {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, key := range keys {
		for {
			r := diskSend(t, g, "/work", key)
			if r.kind() == "replayed" {
				if b, ok := answered[key]; ok && !bytes.Equal(b, r.Body) {
					t.Errorf("%s: kept key %s replays other bytes than the keeper answered", when, key)
				}
				s.acked[key] = r.Body
				delete(s.kept, key)
				break
			}
			if r.kind() != "kept" || time.Now().After(deadline) {
				t.Fatalf("%s: kept key %s once the disk has room: %v", when, key, r)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := s.up.count(key); n != 1 {
			t.Errorf("%s: kept key %s ran %d times upstream", when, key, n)
		}
	}
}

// orphans retries the keys kept by a gateway that was stopped or killed
// while the disk was full, once their lease ended: the lease rule decides
// (OnStale: they may run again). It returns how many ran again and how the
// others were answered.
func (s *diskState) orphans(g *gw, keys []string, when string) (rerun int, kinds map[string]int) {
	t := s.t
	t.Helper()
	kinds = map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for _, key := range keys {
		var r diskCall
		for {
			r = diskSend(t, g, "/work", key)
			if r.Status != 409 || !strings.Contains(string(r.Body), "in_progress") || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // its lease has not ended yet
		}
		k := r.kind()
		if r.Status == 409 {
			var p struct{ Type string }
			_ = json.Unmarshal(r.Body, &p)
			k = "409 " + p.Type[strings.LastIndex(p.Type, "/")+1:]
		}
		kinds[k]++
		switch n := s.up.count(key); {
		case n == 2 && k == "acked":
			rerun++
			s.rerun[key] = true
			s.acked[key] = r.Body
		case n == 1 && k == "replayed":
			// Its outcome was written before the gateway went: it is
			// acknowledged now, and must replay as it does here.
			s.acked[key] = r.Body
		case n == 1 && k != "acked":
		default:
			t.Errorf("%s: key kept by a gone gateway: %v after %d runs upstream", when, r, n)
		}
		delete(s.kept, key)
	}
	t.Logf("%s: %d keys kept in memory by a gateway gone before the disk freed: %d ran again after their lease, answers %v",
		when, len(keys), rerun, kinds)
	return rerun, kinds
}

// TestGatewayDiskFull runs `idem serve` on the file store, then on the
// Pebble store, on a small tmpfs in front of a real upstream, and fills
// the disk with calls. The store refuses new keys while it has less free
// than an outcome of max_response_bytes needs, so no key runs upstream
// without room to record its outcome. While it is full, new keys get 503
// with Retry-After at once, acknowledged keys replay byte for byte,
// /readyz says not writable, and outcomes the gateway keeps in memory are
// not run again on retry; once room comes back it records again without
// a restart and writes what it kept. It reopens on the full disk after
// SIGTERM and after kill -9, and no acknowledged key ever runs twice
// upstream.
func TestGatewayDiskFull(t *testing.T) {
	for _, scheme := range []string{"file", "pebble"} {
		t.Run(scheme, func(t *testing.T) { gatewayDiskFull(t, scheme) })
	}
}

// gatewayDiskFull is TestGatewayDiskFull on the store of scheme.
func gatewayDiskFull(t *testing.T, scheme string) {
	disk := tmpdisk.Mount(t, "12m")
	dir := filepath.Join(disk, "store")
	if scheme != "file" {
		dir = scheme + ":" + dir
	}
	up := newCountingUpstream(t)
	s := &diskState{t: t, up: up, acked: map[string][]byte{}, kept: map[string]bool{}, rerun: map[string]bool{}}
	// A short lease: keys kept by a gateway that is gone are free again
	// soon after. Responses are at most 51 KiB: with max_response_bytes
	// 256 KiB the store refuses new keys while less than 320 KiB is free,
	// room for the outcomes of the four clients' keys in flight.
	const yaml = "defaults: {lease: 2s}\nmax_response_bytes: 256KiB\n"

	// Round 1: fill, check while full, free, recover without a restart.
	ballast := filepath.Join(disk, "ballast1")
	tmpdisk.Leave(t, ballast, 2<<20)
	g := startGateway(t, up.URL, dir, yaml)
	_, kept1 := s.fill(g, "r1")
	kept1 = append(kept1, s.whileFull(g, "r1")...)
	answered := s.retryKept(g, kept1, "r1 full")
	s.recover(g, ballast, "r1")
	s.writtenKept(g, kept1, answered, "r1 recovered")
	s.replayAll(g, "r1 recovered")

	// Round 2: full again, SIGTERM, reopen on the still-full disk.
	ballast = filepath.Join(disk, "ballast2")
	tmpdisk.Leave(t, ballast, 1<<20)
	_, kept2 := s.fill(g, "r2")
	s.retryKept(g, kept2, "r2 full")
	began := time.Now()
	if err := g.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("SIGTERM on the full disk: %v", err)
	}
	t.Logf("r2: the gateway exited %v after SIGTERM on the full disk, holding %d kept outcomes", time.Since(began), len(kept2))
	t.Logf("r2: stopped on the full disk, %d bytes free", tmpdisk.Free(t, disk))
	g = startGateway(t, up.URL, dir, yaml)
	t.Logf("r2: reopened on the full disk, %d bytes free", tmpdisk.Free(t, disk))
	s.replayAll(g, "r2 reopened full")
	primed2 := s.whileFull(g, "r2 reopened")
	s.retryKept(g, primed2, "r2 reopened full")
	s.recover(g, ballast, "r2")
	s.writtenKept(g, primed2, nil, "r2 recovered")
	rerun2, _ := s.orphans(g, kept2, "r2 after SIGTERM")
	s.replayAll(g, "r2 recovered")

	// Round 3: full again, kill -9, reopen on the still-full disk.
	ballast = filepath.Join(disk, "ballast3")
	tmpdisk.Leave(t, ballast, 1<<20)
	_, kept3 := s.fill(g, "r3")
	s.retryKept(g, kept3, "r3 full")
	g.kill()
	t.Logf("r3: killed on the full disk, %d bytes free", tmpdisk.Free(t, disk))
	g = startGateway(t, up.URL, dir, yaml)
	t.Logf("r3: reopened on the full disk, %d bytes free", tmpdisk.Free(t, disk))
	s.replayAll(g, "r3 reopened full after kill -9")
	primed3 := s.whileFull(g, "r3 reopened")
	s.retryKept(g, primed3, "r3 reopened full")
	s.recover(g, ballast, "r3")
	s.writtenKept(g, primed3, nil, "r3 recovered")
	rerun3, _ := s.orphans(g, kept3, "r3 after kill -9")
	s.replayAll(g, "r3 recovered")

	// Across the test: no acknowledged key ran twice; a key kept by a
	// gateway gone before room came back ran once unacknowledged, then
	// once more at most.
	twice := 0
	for key := range s.acked {
		if n := up.count(key); n > 2 || n == 2 && !s.rerun[key] {
			twice++
		}
	}
	if twice > 0 {
		t.Errorf("%d acknowledged keys ran twice upstream", twice)
	}
	// Admission by free space: no key ran upstream that the store had no
	// room to record the outcome of.
	if n := len(kept1) + len(kept2) + len(kept3) + len(primed2) + len(primed3); n > 0 {
		t.Errorf("%d keys ran upstream and their outcome could not be recorded (kept in memory): admitted without room for it", n)
	}
	t.Logf("%d acknowledged keys, %d ran twice; kept in memory and written once room came back: %d; kept by a gateway gone before room came back: %d (SIGTERM), %d (kill -9), of which ran again after their lease: %d, %d",
		len(s.acked), twice, len(kept1)+len(primed2)+len(primed3), len(kept2), len(kept3), rerun2, rerun3)
}

// TestGatewayDiskFullFreshStore: a gateway on a new file store with only
// 1 MiB free records small responses, and replays them.
func TestGatewayDiskFullFreshStore(t *testing.T) {
	disk := tmpdisk.Mount(t, "12m")
	tmpdisk.Leave(t, filepath.Join(disk, "ballast"), 1<<20)
	if free := tmpdisk.Free(t, disk); free > 1<<20 {
		t.Fatalf("%d bytes free, want 1 MiB", free)
	}
	up := newCountingUpstream(t)
	// Responses of 1 KiB: told so, the store takes new keys in 1 MiB.
	g := startGateway(t, up.URL, filepath.Join(disk, "store"), "max_response_bytes: 64KiB\n")
	bodies := map[string][]byte{}
	for i := range 50 {
		key := fmt.Sprint("small-", i)
		r := diskSend(t, g, "/small", key)
		if r.kind() != "acked" {
			t.Fatalf("response %d of 1 KiB with 1 MiB free: %v", i, r)
		}
		bodies[key] = r.Body
	}
	for key, body := range bodies {
		r := diskSend(t, g, "/small", key)
		if r.kind() != "replayed" || !bytes.Equal(r.Body, body) || up.count(key) != 1 {
			t.Errorf("key %s: %v after %d runs, want its first body replayed", key, r, up.count(key))
		}
	}
	t.Logf("%d responses of about 1 KiB recorded and replayed with 1 MiB free; %d bytes free after", len(bodies), tmpdisk.Free(t, disk))
}
