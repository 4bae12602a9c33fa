package dsn

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/file"
	pebblestore "github.com/idem-dev/idem/store/pebble"
)

// A store the gateway creates is marked as holding no record of the
// versions before framed identities, and is known so when opened again; a
// directory an earlier version wrote (no mark) is not, and the legacy
// record in it replays through an engine that reads legacy identities
// when FramedOnly is false, as `idem serve` builds its engine.
func TestFramedOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := Open(ctx, "memory:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.FramedOnly {
		t.Error("memory: FramedOnly false, want true: a memory store is new at every start")
	}
	m.Close()
	if _, err := idem.ValidateKey(framedKey, 0); err == nil {
		t.Errorf("the mark's key %q is a valid key: a call could reach the mark", framedKey)
	}

	earlier := map[string]func(dir string) (store.Store, error){
		"file": func(dir string) (store.Store, error) { return file.Open(dir, file.Options{}) },
		"pebble": func(dir string) (store.Store, error) {
			return pebblestore.Open(dir, pebblestore.Options{})
		},
	}
	for kind, openRaw := range earlier {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "new")
			for i := range 2 {
				o, err := Open(ctx, kind+":"+dir, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if !o.FramedOnly {
					t.Errorf("open %d of a directory this version created: FramedOnly false", i+1)
				}
				roundTrip(t, o)
				if err := o.Close(); err != nil {
					t.Fatal(err)
				}
			}

			// Written by an earlier version: its engine named records by
			// the legacy identity, and left no mark.
			old := filepath.Join(t.TempDir(), "old")
			raw, err := openRaw(old)
			if err != nil {
				t.Fatal(err)
			}
			p := idem.Policy{CleanupInterval: -1, Lease: time.Minute}
			call := idem.Call{Scope: "cred:0123456789abcdef0123456789abcdef|POST /charges", Key: "k", Fingerprint: "fp"}
			e := idem.New(raw, p, idem.WithKeyHash(store.LegacyHashKey))
			if _, err := e.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("first"), nil }); err != nil {
				t.Fatal(err)
			}
			e.Close()
			if err := raw.Close(); err != nil {
				t.Fatal(err)
			}
			o, err := Open(ctx, kind+":"+old, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			if o.FramedOnly {
				t.Fatal("a directory an earlier version wrote: FramedOnly true")
			}
			e = idem.New(o, p, idem.WithLegacyReads(!o.FramedOnly))
			defer e.Close()
			res, err := e.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("again"), nil })
			if err != nil || !res.Replayed || string(res.Value) != "first" {
				t.Errorf("the earlier version's record: %+v %v, want it replayed", res, err)
			}
		})
	}
}
