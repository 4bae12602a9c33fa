package idem

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"

	"github.com/google/uuid"

	"github.com/idem-dev/idem/store"
)

// recordNamespace is the UUID namespace of record IDs (a random UUIDv4,
// fixed forever: changing it would rename every operation's own writes).
var recordNamespace = uuid.MustParse("6c3f1f0e-4b53-4f0e-9b0c-2a6d2d8f5e11")

// RecordID returns the stable identity of the record of (scope, key): a
// name-based UUID (version 5) of the key's hash, the same in every process,
// for the first holder and for every holder that takes the key over after it
// died. Operations name their own writes by it (the task object of a queue
// on S3, a ledger's transfer row) so that a re-run after a crash finds what
// the dead holder wrote instead of writing it twice. key is validated and
// trimmed as Do does; an invalid key gives "".
//
// It is derived from store.HashKey, which frames scope and key, whatever
// names the store gives its records: two pairs never share an ID.
//
// It is derived, not stored: every store keeps it across takeovers without
// knowing about it, and an operation can compute it before Do runs. The
// price: a key used again after its record expired (or was released) has
// the same ID, so writes named by it should carry their own expiry (or be
// removed with the work they describe) no later than the record's TTL.
func RecordID(scope, key string) string {
	key, err := ValidateKey(key, math.MaxInt) // the policy's limit applies in Do
	if err != nil {
		return ""
	}
	return recordID(store.HashKey(scope, key))
}

// FindRecord returns the live record of key in scope in s as an engine
// over s finds it (Engine.Lookup): under its identity (s's own record
// names, store.KeyHasherOf, or store.HashKey), or where idem kept it before
// identities framed the scope (store.LegacyHashKey), and only if the record
// holds this scope and key. It is for operator tools that read a store
// directly (the gateway's admin page, `idem inspect`); the key is trimmed
// as Do trims it. It returns an error matching store.ErrNotFound when there
// is no such record, and one matching store.ErrForeignRecord when the
// record under the key's identity holds another scope or key.
func FindRecord(ctx context.Context, s store.Store, scope, key string) (store.Record, error) {
	key, err := ValidateKey(key, math.MaxInt)
	if err != nil {
		return store.Record{}, err
	}
	sh := &shared{}
	sh.storeHash, _ = store.KeyHasherOf(s)
	sh.decideLegacyReads(s)
	rec, id, err := sh.find(ctx, s, Call{Scope: scope, Key: key})
	switch {
	case err != nil:
		return store.Record{}, err
	case !owns(Call{Scope: id.scope, Key: key}, rec):
		return store.Record{}, fmt.Errorf("idem: key %q: %w", key, store.ErrForeignRecord)
	}
	return rec, nil
}

func recordID(keyHash string) string {
	b, err := hex.DecodeString(keyHash)
	if err != nil {
		b = []byte(keyHash)
	}
	return uuid.NewSHA1(recordNamespace, b).String()
}

// Hold describes the reservation an operation runs under. Do puts it in the
// operation's context; HoldFrom reads it.
type Hold struct {
	// ID is the record's stable identity (see RecordID).
	ID string
	// Scope and KeyHash name the record; Key is the validated key.
	Scope, Key, KeyHash string
	// Token fences this holder: stores refuse its writes once another
	// holder took the key over. Packages that complete the record in the
	// operation's own transaction (store/postgres/pgtx) need it.
	Token uint64
	// TookOver is true when this call took the key over from a holder whose
	// lease ran out: the operation may find that holder's writes.
	TookOver bool
}

type holdKey struct{}

// held is what the operation's context carries; HoldFrom derives the rest,
// so that calls whose operation never asks pay no hashing for the ID.
type held struct {
	scope, key, keyHash string
	token               uint64
	tookOver            bool
}

// HoldFrom returns the reservation ctx's operation runs under, and false
// outside an operation run by Do.
func HoldFrom(ctx context.Context) (Hold, bool) {
	h, ok := ctx.Value(holdKey{}).(*held)
	if !ok {
		return Hold{}, false
	}
	return Hold{
		ID: recordID(store.HashKey(h.scope, h.key)), Scope: h.scope, Key: h.key, KeyHash: h.keyHash,
		Token: h.token, TookOver: h.tookOver,
	}, true
}

// newHeld describes the reservation rec, which the operation's context
// (runContext) carries.
func newHeld(rec store.Record, tookOver bool) held {
	return held{scope: rec.Scope, key: rec.Key, keyHash: rec.KeyHash, token: rec.Token, tookOver: tookOver}
}
