package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/storetest"
)

// TestScopeAndKeyFramed: scope "alice" with key "x:y" and scope "alice:x"
// with key "y" are two records: each runs once and gets its own answer,
// with and without sealing (sealing keys the identity, and the identity it
// keys must already tell the pairs apart).
func TestScopeAndKeyFramed(t *testing.T) {
	t.Parallel()
	ring, err := seal.ParseKeyring("0123456789abcdef0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]store.Store{"plain": memory.New(), "sealed": seal.Wrap(memory.New(), ring)} {
		t.Run(name, func(t *testing.T) {
			eng := idem.New(st, idem.Policy{CleanupInterval: -1})
			defer eng.Close()
			ran := 0
			do := func(scope, key, v string) idem.Result {
				t.Helper()
				res, err := eng.Do(bg, idem.Call{Scope: scope, Key: key, Fingerprint: "same body"}, func(context.Context) ([]byte, error) {
					ran++
					return []byte(v), nil
				})
				if err != nil {
					t.Fatalf("%s/%s: %v", scope, key, err)
				}
				return res
			}
			do("alice", "x:y", "alice's answer")
			if res := do("alice:x", "y", "the other caller's answer"); res.Replayed || string(res.Value) != "the other caller's answer" {
				t.Fatalf("scope alice:x key y: %+v, given scope alice key x:y's record", res)
			}
			if res := do("alice", "x:y", "again"); !res.Replayed || string(res.Value) != "alice's answer" {
				t.Fatalf("alice's retry: %+v", res)
			}
			if ran != 2 {
				t.Fatalf("%d executions, want 2", ran)
			}
		})
	}
}

// TestForeignRecordRefused: a record planted under a call's identity that
// holds another scope or key is never replayed to it, nor released.
func TestForeignRecordRefused(t *testing.T) {
	t.Parallel()
	st := memory.New()
	eng := idem.New(st, idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	// The record of scope "mallory" key "k", planted where scope "victim"'s
	// key "k" lives.
	planted := store.ReserveRequest{Record: store.Record{
		KeyHash: store.HashKey("victim", "k"), Scope: "mallory", Key: "k", Fingerprint: "fp",
		State: store.InProgress, Token: 7, RequestID: "planted",
	}, Lease: time.Minute, TTL: time.Hour}
	if _, err := st.Reserve(bg, planted); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(bg, store.Completion{Fence: store.Fence{KeyHash: planted.Record.KeyHash, Scope: "mallory", Token: 7},
		State: store.Succeeded, Value: []byte("mallory's answer"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ran := false
	res, err := eng.Do(bg, idem.Call{Scope: "victim", Key: "k", Fingerprint: "fp"}, func(context.Context) ([]byte, error) {
		ran = true
		return nil, nil
	})
	if !errors.Is(err, store.ErrForeignRecord) || !errors.Is(err, idem.ErrStoreUnavailable) || res.Value != nil || ran {
		t.Fatalf("Do over a foreign record: %+v %v (ran %v), want ErrForeignRecord as a store failure", res, err, ran)
	}
	if _, err := eng.Peek(bg, idem.Call{Scope: "victim", Key: "k", Fingerprint: "fp"}); !errors.Is(err, store.ErrForeignRecord) {
		t.Fatalf("Peek: %v", err)
	}
	if _, err := eng.Lookup(bg, "victim", "k"); !errors.Is(err, store.ErrForeignRecord) {
		t.Fatalf("Lookup: %v", err)
	}
	if err := eng.Release(bg, "victim", "k"); !errors.Is(err, store.ErrForeignRecord) {
		t.Fatalf("Release: %v", err)
	}
	if _, err := idem.FindRecord(bg, st, "victim", "k"); !errors.Is(err, store.ErrForeignRecord) {
		t.Fatalf("FindRecord: %v", err)
	}
}

// TestFormerScopes: a call finds its record under a scope its caller had
// before (Call.FormerScopes), and only while legacy reads are on.
func TestFormerScopes(t *testing.T) {
	t.Parallel()
	st := storetest.Earlier(memory.New())
	before := idem.New(st, idem.Policy{CleanupInterval: -1}, idem.WithKeyHash(store.LegacyHashKey))
	defer before.Close()
	if _, err := before.Do(bg, idem.Call{Scope: "cred:old|POST /x", Key: "k", Fingerprint: "fp"}, func(context.Context) ([]byte, error) {
		return []byte("first"), nil
	}); err != nil {
		t.Fatal(err)
	}
	c := idem.Call{Scope: "cred:new|POST /x", Key: "k", Fingerprint: "fp", FormerScopes: []string{"cred:old|POST /x"}}
	op := func(context.Context) ([]byte, error) { return []byte("second"), nil }

	off := idem.New(st, idem.Policy{CleanupInterval: -1}, idem.WithLegacyReads(false))
	defer off.Close()
	if res, err := off.Peek(bg, c); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("legacy reads off: %+v %v, want not found", res, err)
	}
	eng := idem.New(st, idem.Policy{CleanupInterval: -1})
	defer eng.Close()
	for range 2 {
		if res, err := eng.Do(bg, c, op); err != nil || !res.Replayed || string(res.Value) != "first" {
			t.Fatalf("with the former scope: %+v %v", res, err)
		}
	}
	// The reservation it made under its own identity was given back.
	if _, err := st.Get(bg, c.Scope, store.HashKey(c.Scope, c.Key)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the call's own reservation: %v, want it released", err)
	}
	c.FormerScopes = nil
	if res, err := eng.Do(bg, c, op); err != nil || res.Replayed {
		t.Fatalf("without the former scope: %+v %v, want a first call", res, err)
	}
}
