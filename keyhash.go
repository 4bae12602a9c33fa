package idem

import "github.com/idem-dev/idem/store"

// WithKeyHash makes the engine name records by f(scope, key) instead of
// store.HashKey, the unkeyed SHA-256 of scope:key. Use it with a keyed hash
// (seal.Keyring.MAC over scope and key, say) when a store that is not
// wrapped by seal.Wrap must not let a known key be confirmed against a dump.
// f must be deterministic for as long as records live, and return 64
// lowercase hex digits, the form stores index (they may reject any other):
// a keyed hash whose secret changes makes every earlier record unreachable,
// which is why seal.Wrap, which keys identities per secret, is the way to
// rotate. nil restores store.HashKey.
func WithKeyHash(f func(scope, key string) string) Option {
	return Option{func(s *shared) { s.keyHash = f }}
}

// hashKey is the record identity of key in scope.
func (s *shared) hashKey(scope, key string) string {
	if s.keyHash == nil {
		return store.HashKey(scope, key)
	}
	return s.keyHash(scope, key)
}
