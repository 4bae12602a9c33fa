package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"
)

// Redactor is how a scope, a key or a tenant is printed where it leaves
// the process: the engine's and the middleware's log lines, trace
// attributes, the gateway's admin page. They print hashes, never the
// values: a scope holds the caller's tenant (a user ID, an account), and a
// key may be guessable or carry what the client put in it. Its zero value
// prints unkeyed SHA-256 hashes.
//
// The hashes are for correlating lines, spans and pages, not for finding
// records: they are not the records' identities, which never depend on a
// secret (see WithKeyHash).
type Redactor struct {
	// MAC hashes what is printed. nil means SHA-256 without a key: anyone
	// who reads a printed hash can test a guessed tenant or key against
	// it offline. The gateway passes seal.Keyring.PrintMAC, an HMAC under
	// a key derived from its secret for this purpose alone.
	MAC func(b []byte) string
	// Raw lets log lines at Debug carry the scope and key as they are,
	// besides their hashes; lines at Info and above never do. For a
	// developer's machine, not for logs that leave it.
	Raw bool
}

// WithRedactor sets how the engine prints scopes and keys in its logs, and
// the middleware (idemhttp) in its logs and trace spans. The default is the
// zero Redactor: unkeyed SHA-256 hashes.
func WithRedactor(r Redactor) Option { return Option{func(s *shared) { s.redact = r }} }

// Redactor returns how e prints scopes and keys (WithRedactor).
func (e *Engine) Redactor() Redactor { return e.redact }

// Keyed reports whether the printed hashes are keyed, so that a guess
// cannot be tested against them without the secret.
func (r Redactor) Keyed() bool { return r.MAC != nil }

// Scope returns the printed form of a scope.
func (r Redactor) Scope(scope string) string { return r.hash("idem print scope v1", scope, "") }

// Key returns the printed form of a key in its scope: two scopes' equal
// keys print differently.
func (r Redactor) Key(scope, key string) string { return r.hash("idem print key v1", scope, key) }

// hash frames a and b by length, so that no pair of values prints as
// another pair.
func (r Redactor) hash(domain, a, b string) string {
	buf := make([]byte, 0, len(domain)+len(a)+len(b)+24)
	buf = append(buf, domain...)
	buf = append(buf, 0)
	buf = strconv.AppendInt(buf, int64(len(a)), 10)
	buf = append(buf, ':')
	buf = append(buf, a...)
	buf = append(buf, b...)
	if r.MAC != nil {
		return r.MAC(buf)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:16])
}

// LogAttrs returns the attributes that name a call in a log line at
// level: scope_hash, and key_hash when key is not empty; at Debug and
// below with Raw set, scope and key as they are too.
func (r Redactor) LogAttrs(level slog.Level, scope, key string) []any {
	attrs := make([]any, 0, 8)
	attrs = append(attrs, "scope_hash", r.Scope(scope))
	if key != "" {
		attrs = append(attrs, "key_hash", r.Key(scope, key))
	}
	if r.Raw && level <= slog.LevelDebug {
		attrs = append(attrs, "scope", scope)
		if key != "" {
			attrs = append(attrs, "key", key)
		}
	}
	return attrs
}

// logAttrs is LogAttrs of scope (and key, when known) followed by more.
func (s *shared) logAttrs(level slog.Level, scope, key string, more ...any) []any {
	return append(s.redact.LogAttrs(level, scope, key), more...)
}
