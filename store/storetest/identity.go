package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
)

// Earlier returns s as a store an earlier version of idem wrote to: the
// same records and capabilities (through Unwrap), except that it never
// says it holds no legacy record (store.LegacyFree), so that an engine
// over it looks for them. Tests that let a memory store stand for an
// earlier version's data wrap it, or the engine would rightly not look.
func Earlier(s store.Store) store.Store { return earlier{s} }

type earlier struct{ store.Store }

func (earlier) HoldsNoLegacyRecords() bool { return false }
func (e earlier) Unwrap() store.Store      { return e.Store }

// testIdentityUpgrade: records written before identities framed the scope
// (by an engine naming records by store.LegacyHashKey, as every earlier
// version did) replay, conflict and block exactly as before under an
// engine of this version, on this store; and under the legacy identity,
// where scope "t" with key "x:y" and scope "t:x" with key "y" share a
// name, neither is ever given the other's record.
func testIdentityUpgrade(t *testing.T, h Harness) {
	s := Earlier(newStore(t, h))
	ctx := context.Background()
	p := idem.Policy{CleanupInterval: -1, Lease: time.Minute}
	earlier := idem.New(s, p, idem.WithKeyHash(store.LegacyHashKey))
	defer earlier.Close()
	now := idem.New(s, p)
	defer now.Close()

	u := uniqueKey(t)
	scope := "cred:" + u + "|POST /charges" // holds ':', as the gateway's default scopes do
	call := func(key, fp string) idem.Call {
		return idem.Call{Scope: scope, Key: key, Fingerprint: fp, RequestID: "req-" + key}
	}
	var ran atomic.Int64
	op := func(v string) idem.Func {
		return func(context.Context) ([]byte, error) { ran.Add(1); return []byte(v), nil }
	}

	// Written by the earlier version.
	if _, err := earlier.Do(ctx, call("done", "fp"), op("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := earlier.Do(ctx, call("unknown", "fp"), func(context.Context) ([]byte, error) {
		return nil, fmt.Errorf("cut: %w", idem.ErrOutcomeUnknown)
	}); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	if _, err := earlier.Do(ctx, idem.Call{Scope: "t" + u, Key: "x:y", Fingerprint: "fp"}, op("t's answer")); err != nil {
		t.Fatal(err)
	}
	// A holder of the earlier version, still running.
	release, held := make(chan struct{}), make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		_, err := earlier.Do(ctx, call("held", "fp"), func(context.Context) ([]byte, error) {
			close(held)
			<-release
			return []byte("held's answer"), nil
		})
		holderDone <- err
	}()
	<-held
	// A holder of the earlier version that died: its reservation, never
	// renewed, with a short lease.
	dead := store.ReserveRequest{Record: store.Record{
		KeyHash: store.LegacyHashKey(scope, "dead"), Scope: scope, Key: "dead", Fingerprint: "fp",
		State: store.InProgress, Token: newToken(), RequestID: "req-dead",
	}, Lease: shortLease, TTL: longTTL}
	if res, err := s.Reserve(ctx, dead); err != nil || !res.Acquired {
		t.Fatalf("the dead holder's reservation: %+v %v", res, err)
	}
	ran.Store(0)

	// Read by this version.
	if res, err := now.Do(ctx, call("done", "fp"), op("again")); err != nil || !res.Replayed || string(res.Value) != "first" {
		t.Errorf("a succeeded key: %+v %v, want the first answer replayed", res, err)
	}
	if _, err := now.Do(ctx, call("done", "other"), op("again")); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Errorf("a succeeded key, another body: %v, want ErrFingerprintMismatch", err)
	}
	if _, err := now.Do(ctx, call("unknown", "fp"), op("again")); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Errorf("an outcome unknown: %v, want ErrOutcomeUnknown", err)
	}
	if _, err := now.Do(ctx, call("held", "fp"), op("again")); !errors.Is(err, idem.ErrInProgress) {
		t.Errorf("a key held by a running holder of the earlier version: %v, want ErrInProgress", err)
	}
	if r, err := now.Lookup(ctx, scope, "done"); err != nil || string(r.Value) != "first" {
		t.Errorf("Lookup: %+v %v", r, err)
	}
	if r, err := idem.FindRecord(ctx, s, scope, "done"); err != nil || string(r.Value) != "first" {
		t.Errorf("FindRecord: %+v %v", r, err)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d operations ran for keys the earlier version holds", n)
	}
	close(release)
	if err := <-holderDone; err != nil {
		t.Fatalf("the earlier version's holder: %v", err)
	}
	if res, err := now.Do(ctx, call("held", "fp"), op("again")); err != nil || !res.Replayed || string(res.Value) != "held's answer" {
		t.Errorf("the held key once its holder ended: %+v %v", res, err)
	}
	// An operator frees the unknown outcome with this version; it runs once.
	if err := now.Release(ctx, scope, "unknown"); err != nil {
		t.Errorf("release of an earlier version's unknown outcome: %v", err)
	}
	if res, err := now.Do(ctx, call("unknown", "fp"), op("rerun")); err != nil || res.Replayed {
		t.Errorf("after the release: %+v %v", res, err)
	}
	// The pair that joins to t's string under the legacy identity runs as
	// its own key and never gets t's answer.
	if res, err := now.Do(ctx, idem.Call{Scope: "t" + u + ":x", Key: "y", Fingerprint: "fp"}, op("its own")); err != nil || res.Replayed || string(res.Value) != "its own" {
		t.Errorf("scope t:x key y after scope t key x:y: %+v %v, want its own execution", res, err)
	}
	if res, err := now.Do(ctx, idem.Call{Scope: "t" + u, Key: "x:y", Fingerprint: "fp"}, op("again")); err != nil || !res.Replayed || string(res.Value) != "t's answer" {
		t.Errorf("scope t key x:y: %+v %v, want its own answer replayed", res, err)
	}
	// The dead holder's key is taken over once its lease is over, and runs
	// once.
	deadline := time.Now().Add(20 * shortLease)
	for {
		res, err := now.Do(ctx, call("dead", "fp"), op("taken over"))
		if err == nil {
			if res.Replayed || !res.TookOver {
				t.Errorf("the dead holder's key: %+v, want a takeover", res)
			}
			break
		}
		if !errors.Is(err, idem.ErrInProgress) || time.Now().After(deadline) {
			t.Fatalf("the dead holder's key: %v", err)
		}
		time.Sleep(shortLease / 4)
	}
	if res, err := now.Do(ctx, call("dead", "fp"), op("again")); err != nil || !res.Replayed || string(res.Value) != "taken over" {
		t.Errorf("the dead holder's key after its takeover: %+v %v", res, err)
	}
	if n := ran.Load(); n != 3 {
		t.Errorf("%d operations ran, want 3 (the released key, t:x's own key, the dead holder's)", n)
	}
}
