package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
)

// Sentinel errors, matchable with errors.Is.
var (
	// ErrNoSecret: the secret string held no secret at all.
	ErrNoSecret = errors.New("seal: no secret given")
	// ErrBadSecret: a secret is too short or malformed.
	ErrBadSecret = errors.New("seal: bad secret")
	// ErrUnknownKey: sealed bytes name a key ID that is not in the keyring,
	// typically because the secret that sealed them was dropped from
	// IDEM_SECRET too early (see the package documentation on rotation).
	ErrUnknownKey = errors.New("seal: sealed with a key that is not in the keyring")
	// ErrCorrupt: sealed bytes do not authenticate: altered, truncated, or
	// moved from another record.
	ErrCorrupt = errors.New("seal: sealed value does not authenticate")
)

// MinSecretBytes is the shortest secret accepted. 32 random bytes
// (`openssl rand -base64 32`) is what the documentation recommends.
const MinSecretBytes = 16

// maxIDLen bounds a key ID: it is written into every sealed value.
const maxIDLen = 32

// Keyring holds one or more secrets. The first (the primary) seals and
// indexes new records; the others still open and find the records they
// sealed, so that a secret can be rotated without losing records. A Keyring
// is immutable and safe for concurrent use.
type Keyring struct {
	keys []*key // keys[0] is the primary
	byID map[string]*key
}

// key is what one secret gives: sub-keys derived with HKDF-SHA256, one per
// purpose, so that a MAC never shares a key with the cipher.
type key struct {
	id   string
	mac  []byte    // HMAC-SHA256 key for identities and comparable fields
	macs sync.Pool // of hash.Hash: keyed HMACs, reset and reused
	aead cipher.AEAD
	// print is the HMAC-SHA256 key of what leaves the process (PrintMAC):
	// its own, so that a printed hash is never a record's identity.
	print  []byte
	prints sync.Pool // of hash.Hash under print
}

// ParseKeyring parses IDEM_SECRET: one or more secrets separated by commas
// (or new lines, for a secret file), the first being the primary. Each is
// either "ID:BASE64" (an explicit key ID of letters, digits, '.', '_' or
// '-', up to 32 characters, and at least 16 bytes of key, standard or URL
// base64) or a bare secret of at least 16 bytes used as is, whose ID is
// derived from it. White space around each secret is ignored.
func ParseKeyring(s string) (*Keyring, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' })
	var secrets []Secret
	for i, f := range fields {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		sec, err := parseSecret(f)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
		secrets = append(secrets, sec)
	}
	return NewKeyring(secrets...)
}

// Secret is one secret of a keyring.
type Secret struct {
	// ID names the key in every value it seals. Empty means one derived
	// from Key.
	ID string
	// Key is the secret itself, at least MinSecretBytes long.
	Key []byte
}

// NewKeyring returns a keyring of secrets, the first being the primary.
func NewKeyring(secrets ...Secret) (*Keyring, error) {
	if len(secrets) == 0 {
		return nil, ErrNoSecret
	}
	k := &Keyring{byID: make(map[string]*key, len(secrets))}
	for i, s := range secrets {
		if len(s.Key) < MinSecretBytes {
			return nil, fmt.Errorf("%w: secret %d has %d bytes, want at least %d (try `openssl rand -base64 32`)", ErrBadSecret, i+1, len(s.Key), MinSecretBytes)
		}
		kk, err := derive(s)
		if err != nil {
			return nil, err
		}
		if _, dup := k.byID[kk.id]; dup {
			return nil, fmt.Errorf("%w: key ID %q appears twice", ErrBadSecret, kk.id)
		}
		k.keys = append(k.keys, kk)
		k.byID[kk.id] = kk
	}
	return k, nil
}

func parseSecret(f string) (Secret, error) {
	if i := strings.IndexByte(f, ':'); i > 0 && validID(f[:i]) {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err := enc.DecodeString(f[i+1:]); err == nil {
				if len(b) < MinSecretBytes {
					return Secret{}, fmt.Errorf("%w: read as ID:BASE64, key %q decodes to %d bytes, want at least %d (a bare secret must not start with an ID and a colon)", ErrBadSecret, f[:i], len(b), MinSecretBytes)
				}
				return Secret{ID: f[:i], Key: b}, nil
			}
		}
	}
	// Not ID:BASE64: the whole string is the secret.
	return Secret{Key: []byte(f)}, nil
}

func validID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// The HKDF info strings: one per derived key, versioned so that a later
// format can derive new keys from the same secrets.
const (
	infoMAC = "idem/seal/v1 mac"
	infoEnc = "idem/seal/v1 aes-256-gcm"
	infoID  = "idem/seal/v1 key id"
	// infoPrint keys the hashes that logs, traces and pages print.
	infoPrint = "idem/seal/v1 print"
)

func derive(s Secret) (*key, error) {
	id := s.ID
	if id == "" {
		b, err := hkdf.Key(sha256.New, s.Key, nil, infoID, 4)
		if err != nil {
			return nil, err
		}
		id = "k" + hex.EncodeToString(b)
	} else if !validID(id) {
		return nil, fmt.Errorf("%w: key ID %q: use up to %d letters, digits, '.', '_' or '-'", ErrBadSecret, id, maxIDLen)
	}
	mac, err := hkdf.Key(sha256.New, s.Key, nil, infoMAC, 32)
	if err != nil {
		return nil, err
	}
	enc, err := hkdf.Key(sha256.New, s.Key, nil, infoEnc, 32)
	if err != nil {
		return nil, err
	}
	print, err := hkdf.Key(sha256.New, s.Key, nil, infoPrint, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(enc)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &key{id: id, mac: mac, aead: aead, print: print}, nil
}

// IDs returns the key IDs, the primary first. They are not secret: every
// sealed value names its key by ID.
func (k *Keyring) IDs() []string {
	ids := make([]string, len(k.keys))
	for i, kk := range k.keys {
		ids[i] = kk.id
	}
	return ids
}

// MAC returns the hex HMAC-SHA256 of b under the primary secret. It is the
// keyed hash for values that must be comparable but not guessable (a
// credential, a key); note that it changes when the primary secret does.
func (k *Keyring) MAC(b []byte) string { return k.keys[0].macHex(b) }

func (kk *key) macHex(parts ...[]byte) string {
	return pooledMAC(&kk.macs, kk.mac, sha256.Size, parts...)
}

// PrintMAC returns the hex HMAC-SHA256 of b, its first 128 bits, under a
// key derived from the primary secret for this purpose alone: the keyed
// hash of the scopes, keys and tenants that logs, trace attributes and the
// admin page print (idem.Redactor.MAC), so that one who reads them cannot
// test a guessed credential or key without the secret. It is not MAC: a
// printed hash never names a record. It changes when the primary secret
// does.
func (k *Keyring) PrintMAC(b []byte) string {
	kk := k.keys[0]
	return pooledMAC(&kk.prints, kk.print, 16, b)
}

// pooledMAC is the hex HMAC-SHA256 under key of parts, its first n bytes,
// with an HMAC from pool.
func pooledMAC(pool *sync.Pool, key []byte, n int, parts ...[]byte) string {
	m, _ := pool.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, key)
	}
	for _, p := range parts {
		m.Write(p)
	}
	var sum [sha256.Size]byte
	out := hex.EncodeToString(m.Sum(sum[:0])[:n])
	m.Reset()
	pool.Put(m)
	return out
}

// Sealed bytes are
//
//	"s1" | len(id) (1 byte) | id | 12-byte nonce | AES-256-GCM ciphertext and tag
//
// The key ID is in the clear (the reader needs it to pick the key) and is
// authenticated with the additional data, so it cannot be swapped either.
const sealVersion = "s1"

// Seal encrypts plaintext with the primary secret, binding it to aad: Open
// must be given the same aad. A fresh random nonce is used every time.
func (k *Keyring) Seal(plaintext, aad []byte) []byte {
	kk := k.keys[0]
	head := len(sealVersion) + 1 + len(kk.id)
	out := make([]byte, head+kk.aead.NonceSize(), head+kk.aead.NonceSize()+len(plaintext)+kk.aead.Overhead())
	copy(out, sealVersion)
	out[len(sealVersion)] = byte(len(kk.id))
	copy(out[len(sealVersion)+1:], kk.id)
	nonce := out[head:]
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return kk.aead.Seal(out, nonce, plaintext, withHeader(aad, out[:head]))
}

// Open decrypts what Seal returned with the same aad, with whichever
// secret of the ring sealed it. It returns an error matching ErrUnknownKey
// when that secret is not in the ring, and ErrCorrupt when the bytes do not
// authenticate.
func (k *Keyring) Open(sealed, aad []byte) ([]byte, error) {
	id, err := SealedKeyID(sealed)
	if err != nil {
		return nil, err
	}
	kk, ok := k.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: key ID %q (the keyring has %s); put the secret that sealed it back into IDEM_SECRET, after the first",
			ErrUnknownKey, id, strings.Join(k.IDs(), ", "))
	}
	head := len(sealVersion) + 1 + len(id)
	ns := kk.aead.NonceSize()
	if len(sealed) < head+ns+kk.aead.Overhead() {
		return nil, fmt.Errorf("%w: %d bytes are too short", ErrCorrupt, len(sealed))
	}
	pt, err := kk.aead.Open(nil, sealed[head:head+ns], sealed[head+ns:], withHeader(aad, sealed[:head]))
	if err != nil {
		return nil, fmt.Errorf("%w (key ID %q)", ErrCorrupt, id)
	}
	return pt, nil
}

// SealedKeyID returns the ID of the key that sealed b, without opening it.
func SealedKeyID(b []byte) (string, error) {
	if len(b) < len(sealVersion)+1 || string(b[:len(sealVersion)]) != sealVersion {
		return "", fmt.Errorf("%w: not sealed (no %q header)", ErrCorrupt, sealVersion)
	}
	n := int(b[len(sealVersion)])
	if n == 0 || len(b) < len(sealVersion)+1+n {
		return "", fmt.Errorf("%w: truncated key ID", ErrCorrupt)
	}
	return string(b[len(sealVersion)+1 : len(sealVersion)+1+n]), nil
}

func withHeader(aad, head []byte) []byte {
	b := make([]byte, 0, len(head)+len(aad))
	return append(append(b, head...), aad...)
}
