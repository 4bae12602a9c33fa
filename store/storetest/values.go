package storetest

// Values and keys: any bytes round-trip, raw keys stay out of the index,
// scopes are apart, canceled calls change nothing.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

func testLargeValue(t *testing.T, h Harness) {
	s := newStore(t, h)
	n := 4<<20 + 17
	if h.MaxValue > 0 {
		n = h.MaxValue
	}
	value := make([]byte, n)
	if _, err := rand.Read(value); err != nil {
		t.Fatal(err)
	}
	req := request(uniqueKey(t))
	mustReserve(t, s, req)
	if err := s.Complete(context.Background(), complete(req, store.Succeeded, value)); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, req)
	if !bytes.Equal(got.Value, value) {
		t.Fatalf("a value of %d bytes differs after a round trip (got %d bytes)", n, len(got.Value))
	}
}

func testBinaryValue(t *testing.T, h Harness) {
	s := newStore(t, h)
	for _, v := range [][]byte{{}, {0, 0xff, '"', '\\', '\n', 0x80}, []byte(`{"a":"ü\u0000"}`)} {
		req := request(uniqueKey(t))
		mustReserve(t, s, req)
		if err := s.Complete(context.Background(), complete(req, store.Succeeded, v)); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, req); !bytes.Equal(got.Value, v) {
			t.Fatalf("value %q came back as %q", v, got.Value)
		}
	}
	// Keys and scopes with any printable text, including quotes, slashes and
	// non-ASCII letters.
	for _, key := range []string{`a"b'c`, "päyment/ü/../x", strings.Repeat("k", 255), "{tag}:x"} {
		req := request(key + uniqueKey(t))
		req.Record.Scope = `tenant "7"/POST /api/x`
		req.Record.KeyHash = store.HashKey(req.Record.Scope, req.Record.Key)
		mustReserve(t, s, req)
		checkRecord(t, mustGet(t, s, req), req.Record)
	}
}

func testContextCanceled(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := request(uniqueKey(t))
	if _, err := s.Reserve(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve with a canceled context: %v", err)
	}
	wantNotFound(t, s, req)
	mustReserve(t, s, req)
	before := mustGet(t, s, req)
	if _, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get: %v", err)
	}
	if err := s.Renew(ctx, fence(req), 2*longLease); !errors.Is(err, context.Canceled) {
		t.Fatalf("Renew: %v", err)
	}
	if err := s.Complete(ctx, complete(req, store.Succeeded, []byte("x"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Complete: %v", err)
	}
	if err := s.Release(ctx, fence(req)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release: %v", err)
	}
	if _, err := s.Cleanup(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Cleanup: %v", err)
	}
	// Nothing above took effect.
	got := mustGet(t, s, req)
	if got.State != store.InProgress || !got.LeaseUntil.Equal(before.LeaseUntil) {
		t.Fatalf("a canceled call changed the record: %+v", got)
	}
	// A deadline that passes while waiting is reported as such.
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	if _, err := s.Reserve(dctx, request(uniqueKey(t))); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve past its deadline: %v", err)
	}
}

func testKeyNotIndexed(t *testing.T, h Harness) {
	if h.IndexKeys == nil {
		t.Skip("the harness cannot list the index")
	}
	s := newStore(t, h)
	raw := "raw-key-" + uniqueKey(t)
	req := request(raw)
	mustReserve(t, s, req)
	found := false
	for _, k := range h.IndexKeys(t, s) {
		if strings.Contains(k, raw) {
			t.Fatalf("index key %q contains the raw key", k)
		}
		if strings.Contains(k, req.Record.KeyHash) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no index key holds the key hash %s", req.Record.KeyHash)
	}
}

func testIsolation(t *testing.T, h Harness) {
	s := newStore(t, h)
	// The same client key in two scopes is two records.
	key := uniqueKey(t)
	a, b := request(key), request(key)
	a.Record.Scope, b.Record.Scope = "tenant-a", "tenant-b"
	a.Record.KeyHash, b.Record.KeyHash = store.HashKey("tenant-a", key), store.HashKey("tenant-b", key)
	mustReserve(t, s, a)
	mustReserve(t, s, b)
	if err := s.Complete(context.Background(), complete(a, store.Succeeded, []byte("A"))); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, b); got.State != store.InProgress || len(got.Value) != 0 {
		t.Fatalf("tenant b sees %+v", got)
	}
	// Returned records are copies.
	got := mustGet(t, s, a)
	got.Value[0] = 'X'
	if again := mustGet(t, s, a); string(again.Value) != "A" {
		t.Fatalf("mutating a returned value changed the store: %q", again.Value)
	}
}

func testClose(t *testing.T, h Harness) {
	s := h.New(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(context.Background(), request(uniqueKey(t))); err == nil {
		t.Fatal("Reserve after Close succeeded")
	}
}
