package idem

import (
	"strings"

	"github.com/idem-dev/idem/store"
)

// WithKeyHash makes the engine name records by f(scope, key) instead of
// store.HashKey, the SHA-256 of scope (escaped) and key. Use it with a keyed
// hash (seal.Keyring.MAC over scope and key, say) when a store that is not
// wrapped by seal.Wrap must not let a known key be confirmed against a dump.
// f must be deterministic for as long as records live, must give two
// different (scope, key) pairs two different hashes, and must return 64
// lowercase hex digits, the form stores index (they may reject any other):
// a keyed hash whose secret changes makes every earlier record unreachable,
// which is why seal.Wrap, which keys identities per secret, is the way to
// rotate. nil restores the default. Records named by f are never looked
// for under another identity (WithLegacyReads).
func WithKeyHash(f func(scope, key string) string) Option {
	return Option{func(s *shared) { s.keyHash = f }}
}

// WithLegacyReads says whether the engine also looks for a call's record
// where idem kept it before record identities framed the scope
// (store.LegacyHashKey, for a scope holding ':' or '%') and under the
// call's FormerScopes. The default is true, so that records written
// before the upgrade are replayed, conflict and block exactly as before,
// except on a store that can hold no such record (store.LegacyFree: the
// memory store). It costs a first call whose scope holds ':' or '%', or
// that names former scopes, one store read per identity, and nothing
// otherwise (a replay finds its record at once). Turn it off once every record written before the
// upgrade has expired: one TTL (the longest of your policies') after the
// last process running the earlier version stopped.
func WithLegacyReads(on bool) Option {
	return Option{func(s *shared) { s.legacyReads = &on }}
}

// decideLegacyReads settles whether the engine over st reads former
// identities: as WithLegacyReads said, else unless st can hold no record
// an earlier version wrote.
func (s *shared) decideLegacyReads(st store.Store) {
	s.legacyReadsOn = !store.HoldsNoLegacyRecords(st)
	if s.legacyReads != nil {
		s.legacyReadsOn = *s.legacyReads
	}
}

// hashKey is the record identity of key in scope.
func (s *shared) hashKey(scope, key string) string {
	switch {
	case s.keyHash != nil:
		return s.keyHash(scope, key)
	case s.storeHash != nil:
		return s.storeHash.HashKey(scope, key)
	}
	return store.HashKey(scope, key)
}

// identity names one place a record may be kept.
type identity struct{ scope, keyHash string }

// formerIdentities returns where else than (c.Scope, primary) an earlier
// version of idem may have kept the record of key: under the legacy hash
// of its scope (and, for a store with record names of its own, under the
// package's hash, which a wrapper hiding those names gave it), and under
// each of c.FormerScopes, by every one of these hashes. Only a scope
// holding ':' or '%' names its records differently under them. None when
// legacy reads are off or the engine names records by a hash of the
// caller's own (WithKeyHash).
func (s *shared) formerIdentities(c Call, key, primary string) []identity {
	if !s.legacyReadsOn || s.keyHash != nil {
		return nil
	}
	var ids []identity
	add := func(scope, h string) {
		if scope == c.Scope && h == primary {
			return
		}
		for _, id := range ids {
			if id.scope == scope && id.keyHash == h {
				return
			}
		}
		ids = append(ids, identity{scope, h})
	}
	for i := -1; i < len(c.FormerScopes); i++ {
		scope := c.Scope
		if i >= 0 {
			scope = c.FormerScopes[i]
			add(scope, s.hashKey(scope, key))
		}
		if strings.ContainsAny(scope, "%:") {
			add(scope, store.LegacyHashKey(scope, key))
			if s.storeHash != nil {
				add(scope, store.HashKey(scope, key))
			}
		}
	}
	return ids
}
