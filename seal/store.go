package seal

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idem-dev/idem/store"
)

// Store is a store.Store that keeps nothing a client sent or received
// readable in the store it wraps. See the package documentation for what
// it does to each field and why.
type Store struct {
	inner store.Store
	ring  *Keyring
}

var _ store.Store = (*Store)(nil)

// Wrap returns s with every record sealed by k: identities and comparable
// fields keyed-hashed, the raw key, request ID, fingerprint, binding and
// stored outcome encrypted. Records written through Wrap are found only
// through Wrap with a keyring that holds the secret that indexed them.
//
// The result is a *Store, or, when s is (or wraps) a store.Notifier, a
// store that is a Notifier too and notifies under sealed identities (and a
// store.RecordNotifier carrying sealed records when s's Notifier is a
// store.RecordCarrier). All have Unwrap.
func Wrap(s store.Store, k *Keyring) store.Store {
	if s == nil || k == nil {
		panic("seal: Wrap needs a store and a keyring")
	}
	st := &Store{inner: s, ring: k}
	if n, ok := store.NotifierOf(s); ok {
		if c, ok := n.(store.RecordCarrier); ok {
			return &carryingStore{notifyingStore{Store: st, n: n}, c}
		}
		return &notifyingStore{Store: st, n: n}
	}
	return st
}

// Unwrap returns the wrapped store, so that callers can find its optional
// capabilities. Writing to it directly bypasses the seal.
func (s *Store) Unwrap() store.Store { return s.inner }

// keyPrefix starts the Key column of every sealed record: what follows is
// the base64 of the sealed envelope.
const keyPrefix = "idem-sealed:"

// identity is where the record of (scope, keyHash) lives under one secret.
type identity struct {
	kk      *key
	keyHash string // HMAC of the engine's key hash: the stored KeyHash
	scope   string // HMAC of the engine's scope: the stored Scope
}

func (s *Store) identity(kk *key, scope, keyHash string) identity {
	return identity{
		kk:      kk,
		keyHash: kk.macHex([]byte("idem/seal/v1 key\x00"), []byte(keyHash)),
		scope:   kk.macHex([]byte("idem/seal/v1 scope\x00"), []byte(scope)),
	}
}

// identities returns the record's identity under every secret, the
// primary's first.
func (s *Store) identities(scope, keyHash string) []identity {
	ids := make([]identity, len(s.ring.keys))
	for i, kk := range s.ring.keys {
		ids[i] = s.identity(kk, scope, keyHash)
	}
	return ids
}

// comparable returns the keyed hash of a field the store itself compares
// (Fingerprint and Binding, for stale takeovers). It is tied to the record
// so that two records with the same request body are not seen to share it.
func comparable(id identity, field, keyHash, v string) string {
	return id.kk.macHex([]byte("idem/seal/v1 "+field+"\x00"), []byte(keyHash), []byte{0}, []byte(v))
}

func aad(kind, keyHash string, token uint64) []byte {
	b := make([]byte, 0, 32+len(keyHash)+8)
	b = append(b, "idem/seal/v1 "...)
	b = append(b, kind...)
	b = append(b, 0)
	b = append(b, keyHash...)
	return binary.BigEndian.AppendUint64(b, token)
}

// seal turns the engine's record r into the record stored at id. The
// envelope and value are sealed by the primary secret whichever identity
// they are stored under.
func (s *Store) seal(r store.Record, id identity) store.Record {
	env := make([]byte, 0, 16+len(r.Key)+len(r.Fingerprint)+len(r.Binding)+len(r.RequestID))
	for _, f := range []string{r.Key, r.Fingerprint, r.Binding, r.RequestID} {
		env = binary.AppendUvarint(env, uint64(len(f)))
		env = append(env, f...)
	}
	out := r
	out.KeyHash = id.keyHash
	out.Scope = id.scope
	out.Key = keyPrefix + base64.RawStdEncoding.EncodeToString(s.ring.Seal(env, aad("record", r.KeyHash, r.Token)))
	out.Fingerprint = comparable(id, "fingerprint", r.KeyHash, r.Fingerprint)
	out.Binding = comparable(id, "binding", r.KeyHash, r.Binding)
	out.RequestID = ""
	if r.Value != nil {
		out.Value = s.ring.Seal(r.Value, aad("value", r.KeyHash, r.Token))
	}
	return out
}

// open turns a stored record, read under id, back into the engine's, for
// scope and the engine's keyHash. A record whose sealed scope is not id's
// keeps it, so that the engine sees a record of another scope (and
// refuses it): the key's hash does not bind the scope for records named
// by a legacy identity (store.LegacyHashKey).
func (s *Store) open(r store.Record, id identity, scope, keyHash string) (store.Record, error) {
	out := r
	out.KeyHash, out.Scope = keyHash, scope
	if r.Scope != id.scope {
		out.Scope = r.Scope
	}
	b64, ok := strings.CutPrefix(r.Key, keyPrefix)
	if !ok {
		return store.Record{}, fmt.Errorf("seal: record %s: %w: its key is not sealed", short(keyHash), ErrCorrupt)
	}
	sealed, err := base64.RawStdEncoding.DecodeString(b64)
	if err != nil {
		return store.Record{}, fmt.Errorf("seal: record %s: %w: %v", short(keyHash), ErrCorrupt, err)
	}
	env, err := s.ring.Open(sealed, aad("record", keyHash, r.Token))
	if err != nil {
		return store.Record{}, fmt.Errorf("seal: record %s: %w", short(keyHash), err)
	}
	var fields [4]string
	for i := range fields {
		n, w := binary.Uvarint(env)
		if w <= 0 || n > uint64(len(env)-w) {
			return store.Record{}, fmt.Errorf("seal: record %s: %w: bad envelope", short(keyHash), ErrCorrupt)
		}
		fields[i] = string(env[w : w+int(n)])
		env = env[w+int(n):]
	}
	out.Key, out.Fingerprint, out.Binding, out.RequestID = fields[0], fields[1], fields[2], fields[3]
	if len(r.Value) > 0 {
		v, err := s.ring.Open(r.Value, aad("value", keyHash, r.Token))
		if err != nil {
			return store.Record{}, fmt.Errorf("seal: record %s: value: %w", short(keyHash), err)
		}
		out.Value = v
	} else {
		out.Value = nil
	}
	return out, nil
}

func short(h string) string { return h[:min(len(h), 12)] }

// Reserve reserves the key under the primary secret's identity. With more
// than one secret, a live record under an older secret's identity counts as
// existing (and is taken over there when stale), so that rotation never
// runs a key twice; see the package documentation.
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	r := req.Record
	ids := s.identities(r.Scope, r.KeyHash)
	for _, id := range ids[1:] {
		ex, err := s.inner.Get(ctx, id.scope, id.keyHash)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return store.Reservation{}, err
		}
		if req.TakeOverStale && ex.Stale() &&
			ex.Fingerprint == comparable(id, "fingerprint", r.KeyHash, r.Fingerprint) &&
			ex.Binding == comparable(id, "binding", r.KeyHash, r.Binding) {
			return s.reserveAt(ctx, req, id)
		}
		rec, err := s.open(ex, id, r.Scope, r.KeyHash)
		if err != nil {
			return store.Reservation{}, err
		}
		return store.Reservation{Existing: rec}, nil
	}
	res, err := s.reserveAt(ctx, req, ids[0])
	if err != nil || !res.Acquired || len(ids) == 1 {
		return res, err
	}
	// Another process may still run with the old secret first and have
	// reserved the key under its identity meanwhile. Each writes its own
	// identity and then reads the other's, so at least one of two such
	// racers sees the other; it steps back.
	own := store.Fence{KeyHash: ids[0].keyHash, Scope: ids[0].scope, Token: r.Token}
	for _, id := range ids[1:] {
		ex, err := s.inner.Get(ctx, id.scope, id.keyHash)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		var rec store.Record
		if err == nil {
			rec, err = s.open(ex, id, r.Scope, r.KeyHash)
		}
		// Another holder, or no way to tell: either way this reservation
		// must not run. Give the key back; if that fails too, the lease
		// frees it.
		rerr := s.inner.Release(ctx, own)
		if err == nil && rerr == nil {
			return store.Reservation{Existing: rec}, nil
		}
		if err == nil {
			err = rerr
		}
		return store.Reservation{}, fmt.Errorf("seal: checking the key under older secrets: %w", err)
	}
	return res, nil
}

func (s *Store) reserveAt(ctx context.Context, req store.ReserveRequest, id identity) (store.Reservation, error) {
	sreq := req
	sreq.Record = s.seal(req.Record, id)
	res, err := s.inner.Reserve(ctx, sreq)
	if err != nil || res.Acquired {
		res.Existing = store.Record{}
		return res, err
	}
	if res.Existing, err = s.open(res.Existing, id, req.Record.Scope, req.Record.KeyHash); err != nil {
		return store.Reservation{}, err
	}
	return res, nil
}

// Get returns the record, looking under each secret's identity in turn.
func (s *Store) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	for _, id := range s.identities(scope, keyHash) {
		r, err := s.inner.Get(ctx, id.scope, id.keyHash)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return store.Record{}, err
		}
		return s.open(r, id, scope, keyHash)
	}
	return store.Record{}, fmt.Errorf("seal: %w", store.ErrNotFound)
}

// fenced runs op against each identity of f until one is not ErrLeaseLost:
// the token is unique, so at most one identity holds it.
func (s *Store) fenced(f store.Fence, op func(store.Fence) error) error {
	var first error
	for _, id := range s.identities(f.Scope, f.KeyHash) {
		err := op(store.Fence{KeyHash: id.keyHash, Scope: id.scope, Token: f.Token})
		if !errors.Is(err, store.ErrLeaseLost) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// Renew extends the lease of the record f holds.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	return s.fenced(f, func(sf store.Fence) error { return s.inner.Renew(ctx, sf, lease) })
}

// Complete seals c.Value with the primary secret and completes the record.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	v := c.Value
	if v == nil {
		v = []byte{}
	}
	sealed := s.ring.Seal(v, aad("value", c.KeyHash, c.Token))
	return s.fenced(c.Fence, func(sf store.Fence) error {
		sc := c
		sc.Fence, sc.Value = sf, sealed
		return s.inner.Complete(ctx, sc)
	})
}

// Release deletes the record f holds.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.fenced(f, func(sf store.Fence) error { return s.inner.Release(ctx, sf) })
}

// Cleanup is the wrapped store's: expiry times are kept in the clear.
func (s *Store) Cleanup(ctx context.Context, limit int) (int, error) {
	return s.inner.Cleanup(ctx, limit)
}

// CountExpired is the wrapped store's, when it has one (`idem cleanup
// --dry-run`).
func (s *Store) CountExpired(ctx context.Context) (int, error) {
	c, ok := s.inner.(interface {
		CountExpired(context.Context) (int, error)
	})
	if !ok {
		return 0, fmt.Errorf("seal: %T cannot count expired records: %w", s.inner, errors.ErrUnsupported)
	}
	return c.CountExpired(ctx)
}

// Close closes the wrapped store.
func (s *Store) Close() error { return s.inner.Close() }
