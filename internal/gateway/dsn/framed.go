package dsn

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"time"

	"github.com/idem-dev/idem/store"
)

// The record that marks an embedded store as created by a version whose
// record identities frame the scope (store.HashKey). Its key is not
// printable, so it is no call's (idem.ValidateKey): no caller can reach or
// replace it, and the engine never replays it (idem's reads take only a
// record holding the caller's own scope and key).
const (
	framedScope = "idem"
	framedKey   = "\x00store created with framed identities"
	framedTTL   = 100 * 365 * 24 * time.Hour
)

// dirFresh reports whether dir holds nothing yet (or does not exist): a
// store opened in it is created by this version. Asked before the store
// opens it, which makes its files.
func dirFresh(dir string) bool {
	des, err := os.ReadDir(dir)
	return errors.Is(err, os.ErrNotExist) || err == nil && len(des) == 0
}

// framedOnly reports whether the embedded store s, opened in a directory
// that was fresh (dirFresh) or not, can hold a record named by
// store.LegacyHashKey, and marks it when it was fresh. Only versions that
// frame identities write the embedded stores' format 2, which earlier
// versions cannot open (no downgrade): a directory this version created
// holds no record of an earlier version, ever. The marker, written before
// any call's record, is itself in format 2, so that an earlier gateway
// refuses the directory even when no call was served in it yet; a
// directory written by an earlier version has no marker, and its legacy
// records are looked for as before. The marker is a record rather than a
// file beside the store's own so that it lives in the store's format and
// is copied with it. A failure to read or write it only keeps legacy reads
// on.
func framedOnly(ctx context.Context, s store.Store, fresh bool) bool {
	h := store.HashKey(framedScope, framedKey)
	if !fresh {
		rec, err := s.Get(ctx, framedScope, h)
		return err == nil && rec.Scope == framedScope && rec.Key == framedKey && rec.State == store.Succeeded
	}
	rec := store.Record{
		KeyHash: h, Scope: framedScope, Key: framedKey, Fingerprint: "-",
		State: store.InProgress, Token: rand.Uint64() | 1,
	}
	res, err := s.Reserve(ctx, store.ReserveRequest{Record: rec, Lease: time.Minute, TTL: framedTTL})
	if err != nil || !res.Acquired {
		return false
	}
	err = s.Complete(ctx, store.Completion{Fence: store.Fence{KeyHash: h, Scope: framedScope, Token: rec.Token},
		State: store.Succeeded, TTL: framedTTL})
	return err == nil
}
