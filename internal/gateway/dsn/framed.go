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
// that was fresh (dirFresh) or not, can hold no record named by
// store.LegacyHashKey, and marks it so when it was fresh. The embedded
// stores' format 2 and framed identities arrive in one release, and
// earlier releases cannot open format 2 (no downgrade, CHANGELOG): a
// directory this version created never holds a record of an earlier one.
// The mark is a record, written before any call's, so that it is in the
// store's own format (an earlier gateway refuses the directory even before
// a call was served in it) and is copied with it. A directory an earlier
// version wrote has no mark, and its records are looked for as before; so
// are those of a store that cannot be shown fresh (the shared stores,
// which a gateway of an earlier version may write beside this one). A
// mark that cannot be read or written only keeps legacy reads on.
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
