package seal_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/idem-dev/idem/seal"
)

const (
	secretA = "a-secret-of-at-least-16-bytes-AAAA"
	secretB = "another-secret-16-bytes-or-more-BB"
)

func mustRing(t testing.TB, s string) *seal.Keyring {
	t.Helper()
	k, err := seal.ParseKeyring(s)
	if err != nil {
		t.Fatalf("ParseKeyring(%q): %v", s, err)
	}
	return k
}

func TestParseKeyring(t *testing.T) {
	t.Parallel()
	key32 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	for _, tc := range []struct {
		in      string
		ids     int
		firstID string
	}{
		{secretA, 1, ""},
		{" " + secretA + " , " + secretB + " ", 2, ""},
		{secretB + "\n" + secretA + "\n", 2, ""}, // a Kubernetes secret file
		{"2026-11:" + key32 + "," + secretA, 2, "2026-11"},
		{"k1:" + strings.TrimRight(base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{9}, 20)), "="), 1, "k1"},
	} {
		k := mustRing(t, tc.in)
		ids := k.IDs()
		if len(ids) != tc.ids {
			t.Errorf("%q: %d keys %v, want %d", tc.in, len(ids), ids, tc.ids)
		}
		if tc.firstID != "" && ids[0] != tc.firstID {
			t.Errorf("%q: primary ID %q, want %q", tc.in, ids[0], tc.firstID)
		}
	}
	// A bare secret's ID is derived from it, the same in every process.
	if a, b := mustRing(t, secretA).IDs()[0], mustRing(t, secretA).IDs()[0]; a != b || !strings.HasPrefix(a, "k") {
		t.Errorf("derived IDs %q, %q", a, b)
	}
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", seal.ErrNoSecret},
		{" , ,", seal.ErrNoSecret},
		{"short", seal.ErrBadSecret},
		{"k1:" + base64.StdEncoding.EncodeToString([]byte("too short")), seal.ErrBadSecret},
		{secretA + "," + secretA, seal.ErrBadSecret}, // the same key twice
	} {
		if _, err := seal.ParseKeyring(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("ParseKeyring(%q): %v, want %v", tc.in, err, tc.want)
		}
	}
}

func TestSealOpen(t *testing.T) {
	t.Parallel()
	a := mustRing(t, secretA)
	ba := mustRing(t, secretB+","+secretA)
	b := mustRing(t, secretB)
	aad := []byte("record 1")
	msg := []byte(`{"id":"ch_1","amount":4200}`)

	sealed := a.Seal(msg, aad)
	if bytes.Contains(sealed, msg) {
		t.Fatal("sealed bytes contain the plaintext")
	}
	if again := a.Seal(msg, aad); bytes.Equal(again, sealed) {
		t.Fatal("two seals of one plaintext are equal: the nonce is not fresh")
	}
	if id, err := seal.SealedKeyID(sealed); err != nil || id != a.IDs()[0] {
		t.Fatalf("SealedKeyID: %q, %v", id, err)
	}
	// After rotation, the old key still opens what it sealed.
	for _, k := range []*seal.Keyring{a, ba} {
		got, err := k.Open(sealed, aad)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("Open with %v: %q, %v", k.IDs(), got, err)
		}
	}
	// The new primary seals new values, which the old ring cannot open.
	fresh := ba.Seal(msg, aad)
	if id, _ := seal.SealedKeyID(fresh); id != b.IDs()[0] {
		t.Fatalf("rotated ring sealed with %q, want the new primary %q", id, b.IDs()[0])
	}
	_, err := a.Open(fresh, aad)
	if !errors.Is(err, seal.ErrUnknownKey) || !strings.Contains(err.Error(), b.IDs()[0]) {
		t.Fatalf("Open with a ring that lacks the key: %v, want ErrUnknownKey naming %s", err, b.IDs()[0])
	}
	// Moved to another record, altered, or truncated: never garbage.
	if _, err := a.Open(sealed, []byte("record 2")); !errors.Is(err, seal.ErrCorrupt) {
		t.Fatalf("Open with other additional data: %v", err)
	}
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	if _, err := a.Open(flipped, aad); !errors.Is(err, seal.ErrCorrupt) {
		t.Fatalf("Open of altered bytes: %v", err)
	}
	for _, bad := range [][]byte{nil, []byte("s1"), sealed[:20], []byte("plaintext body")} {
		if _, err := a.Open(bad, aad); !errors.Is(err, seal.ErrCorrupt) {
			t.Fatalf("Open(%q): %v", bad, err)
		}
	}
}

func TestMAC(t *testing.T) {
	t.Parallel()
	a, ab, b := mustRing(t, secretA), mustRing(t, secretA+","+secretB), mustRing(t, secretB)
	cred := []byte("Basic YWxpY2U6aHVudGVyMg==")
	if a.MAC(cred) != ab.MAC(cred) {
		t.Error("MAC depends on the secondary secrets")
	}
	if a.MAC(cred) == b.MAC(cred) {
		t.Error("MAC does not depend on the secret")
	}
	if m := a.MAC(cred); len(m) != 64 {
		t.Errorf("MAC %q is not 64 hex digits", m)
	}
}

// PrintMAC keys what logs and traces print with a key of its own: it
// follows the primary secret only, and never equals MAC, so that a printed
// hash is never a record's identity.
func TestPrintMAC(t *testing.T) {
	t.Parallel()
	a, ab, b := mustRing(t, secretA), mustRing(t, secretA+","+secretB), mustRing(t, secretB)
	v := []byte("idem print scope v1\x005:alice")
	if a.PrintMAC(v) != ab.PrintMAC(v) {
		t.Error("PrintMAC depends on the secondary secrets")
	}
	if a.PrintMAC(v) == b.PrintMAC(v) {
		t.Error("PrintMAC does not depend on the secret")
	}
	if m := a.PrintMAC(v); len(m) != 32 || strings.HasPrefix(a.MAC(v), m) {
		t.Errorf("PrintMAC %q: want 32 hex digits, not MAC's %q", m, a.MAC(v))
	}
}

// Whatever bytes a store hands back (a corrupt row, a truncated object),
// Open fails cleanly or returns what was sealed; it never panics.
func FuzzOpen(f *testing.F) {
	k := mustRing(f, secretA)
	f.Add(k.Seal([]byte("body"), []byte("aad")), []byte("aad"))
	f.Add([]byte("s1\x09kdeadbeef"), []byte{})
	f.Add([]byte("s1\xff"), []byte("x"))
	f.Fuzz(func(t *testing.T, sealed, aad []byte) {
		pt, err := k.Open(sealed, aad)
		if err == nil && !bytes.Equal(k.Seal(pt, aad)[:2], []byte("s1")) {
			t.Fatal("unreachable")
		}
	})
}

// IDEM_SECRET is operator input: any string parses or fails cleanly.
func FuzzParseKeyring(f *testing.F) {
	for _, s := range []string{secretA, "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)), ":,::", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := seal.ParseKeyring(s)
		if err == nil && (len(k.IDs()) == 0 || k.MAC([]byte("x")) == "") {
			t.Fatalf("ParseKeyring(%q) gave an empty ring", s)
		}
	})
}
