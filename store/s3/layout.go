package s3store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idem-dev/idem/store"
)

// Dir is the folder, under Options.Prefix, that holds every record (seed
// 004's idempotency/ next to its tasks/).
const Dir = "idempotency/"

// maxScopeSegment bounds the escaped scope in an object key. POSIX-backed
// servers map each "/"-separated segment to a file name, which most file
// systems cap at 255 bytes; longer segments are replaced by a hash.
const maxScopeSegment = 200

// ScopeSegment returns the folder name of scope under idempotency/.
//
// Letters, digits, '-', '_' and '.' stay as they are, so the seed's task
// types read as written ("charge_customer"). Every other byte, '/' and '%'
// included, is percent-encoded (%XX, upper case), so a scope never adds a
// folder level and never names "." or ".." (their dots are encoded too).
// That encoding is reversible, so two scopes never share a folder. Two
// forms no encoding produces, because '~' is always encoded, cover the
// rest: "~" for the empty scope, and "~" + the hex SHA-256 of the scope for
// a scope whose encoding is longer than 200 bytes (file systems behind
// S3-compatible servers cap a path segment at 255 bytes).
//
// The folder only groups records; the object's name, the key hash, already
// identifies (scope, key).
func ScopeSegment(scope string) string {
	if scope == "" {
		return "~"
	}
	var b strings.Builder
	const hexdig = "0123456789ABCDEF"
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexdig[c>>4])
			b.WriteByte(hexdig[c&15])
		}
	}
	seg := b.String()
	if strings.Trim(seg, ".") == "" { // "." or ".." (or more dots)
		seg = strings.ReplaceAll(seg, ".", "%2E")
	}
	if len(seg) > maxScopeSegment {
		sum := sha256.Sum256([]byte(scope))
		return "~" + hex.EncodeToString(sum[:])
	}
	return seg
}

// validKeyHash reports whether h is 64 lowercase hex digits, the only form
// store.HashKey produces; anything else could name another object.
func validKeyHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// formatVersion is written into every object, so that a later format can
// tell the objects of this one apart.
const formatVersion = 1

// object is a record as stored: JSON close to the S3 task queue's example. The token
// is a decimal string because JSON numbers are doubles to most readers and
// cannot hold every uint64; the value is base64 (encoding/json's []byte).
type object struct {
	Version    int       `json:"version"`
	Key        string    `json:"key"`
	KeyHash    string    `json:"key_hash"` // "sha256:" + hex, as in the S3 task queue
	Scope      string    `json:"scope"`
	State      string    `json:"state"`
	Token      string    `json:"token"`
	InputHash  string    `json:"input_hash"` // the fingerprint
	Binding    string    `json:"binding,omitempty"`
	Value      []byte    `json:"value,omitempty"`
	RequestID  string    `json:"request_id,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	LeaseUntil time.Time `json:"lease_until"`
}

const keyHashPrefix = "sha256:"

// encode returns the object body of r. The same record always encodes to
// the same bytes, which lets a writer recognise its own earlier write.
func encode(r *store.Record) ([]byte, error) {
	o := object{
		Version:    formatVersion,
		Key:        r.Key,
		KeyHash:    keyHashPrefix + r.KeyHash,
		Scope:      r.Scope,
		State:      string(r.State),
		Token:      strconv.FormatUint(r.Token, 10),
		InputHash:  r.Fingerprint,
		Binding:    r.Binding,
		Value:      r.Value,
		RequestID:  r.RequestID,
		CreatedAt:  r.CreatedAt.UTC(),
		UpdatedAt:  r.UpdatedAt.UTC(),
		ExpiresAt:  r.ExpiresAt.UTC(),
		LeaseUntil: r.LeaseUntil.UTC(),
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keys and scopes read as written
	enc.SetIndent("", "  ")
	if err := enc.Encode(&o); err != nil {
		return nil, fmt.Errorf("s3store: encode record %s: %w", r.KeyHash, err)
	}
	return buf.Bytes(), nil
}

// decode parses an object body read under the name of keyHash.
func decode(keyHash string, body []byte) (store.Record, error) {
	var o object
	if err := json.Unmarshal(body, &o); err != nil {
		return store.Record{}, fmt.Errorf("s3store: record %s: %w", keyHash, err)
	}
	if o.Version != formatVersion {
		return store.Record{}, fmt.Errorf("s3store: record %s: format version %d, want %d", keyHash, o.Version, formatVersion)
	}
	if h := strings.TrimPrefix(o.KeyHash, keyHashPrefix); h != keyHash {
		// A record copied or renamed by hand would answer for another key.
		return store.Record{}, fmt.Errorf("s3store: record %s holds key hash %q", keyHash, o.KeyHash)
	}
	tok, err := strconv.ParseUint(o.Token, 10, 64)
	if err != nil {
		return store.Record{}, fmt.Errorf("s3store: record %s: token: %w", keyHash, err)
	}
	r := store.Record{
		KeyHash:     keyHash,
		Scope:       o.Scope,
		Key:         o.Key,
		Fingerprint: o.InputHash,
		Binding:     o.Binding,
		State:       store.State(o.State),
		Token:       tok,
		Value:       o.Value,
		RequestID:   o.RequestID,
		CreatedAt:   o.CreatedAt,
		UpdatedAt:   o.UpdatedAt,
		ExpiresAt:   o.ExpiresAt,
		LeaseUntil:  o.LeaseUntil,
	}
	if !r.State.Valid() {
		return store.Record{}, fmt.Errorf("s3store: record %s: invalid state %q", keyHash, o.State)
	}
	return r, nil
}
