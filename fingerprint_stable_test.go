package idem_test

import (
	"strings"
	"testing"

	"github.com/idem-dev/idem"
)

// TestFingerprintsStable pins fingerprints to the values earlier releases
// stored: a retry that arrives after an upgrade must still match its
// record, whatever the hashing's implementation does to save allocations
// (the stack buffer and the hash.Hash paths of HashParts, in-place member
// sorting of CanonicalJSON).
func TestFingerprintsStable(t *testing.T) {
	big := strings.Repeat("x", 300)
	for _, c := range []struct{ name, got, want string }{
		{"parts", idem.HashParts([]byte("POST"), []byte("/charges?a=1"), []byte("sha256:abc")), "sha256:bd4b605edc93e54fb356d379700c2f3f42a9645c30dd47a2ef68338c6098b541"},
		{"strings", idem.HashStrings("POST", "/charges?a=1", "sha256:abc"), "sha256:bd4b605edc93e54fb356d379700c2f3f42a9645c30dd47a2ef68338c6098b541"},
		{"large parts", idem.HashParts([]byte("POST"), []byte(big)), "sha256:9a99189ea9404886b5dcc84a8e09ff252f71af03b0c12a62fdb92618140d0c27"},
		{"large strings", idem.HashStrings("POST", big), "sha256:9a99189ea9404886b5dcc84a8e09ff252f71af03b0c12a62fdb92618140d0c27"},
		{"no parts", idem.HashParts(), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"bytes", idem.HashBytes([]byte("hello")), "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s, earlier releases stored %s", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct{ doc, canon, hash string }{
		{`{"b":{"z":1,"a":[{"y":"\u00e9","x":"\/"}]},"a":"q\"\n","c":null}`,
			`{"a":"q\"\n","b":{"a":[{"x":"/","y":"é"}],"z":1},"c":null}`,
			"sha256:fc1a5db65a5f348d8bb607fd7b6f3e9dfb3514b116bed40afcfdde85cfcf491f"},
		{`[{"k":{}},{"b":1,"a":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10}]`,
			`[{"k":{}},{"a":2,"b":1,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10}]`,
			"sha256:4cb91c25bc3183063791c5e79c77c147e3cdb139ee6bf6bb5b853435f038156f"},
		{`{"amount":1000,"currency":"eur","customer":"cus_123"}`,
			`{"amount":1000,"currency":"eur","customer":"cus_123"}`,
			"sha256:ab70f5455d6c175d1fa37a290530d4cb94e60f2deeac2d6c8380df81a1c49431"},
	} {
		canon, err := idem.CanonicalJSON([]byte(c.doc))
		h, _ := idem.HashJSONBytes([]byte(c.doc))
		if err != nil || string(canon) != c.canon || h != c.hash {
			t.Errorf("%s: canonical %s (%v), hash %s; want %s, %s", c.doc, canon, err, h, c.canon, c.hash)
		}
	}
}

// TestHashAllocs holds the hashing on a request's path to one allocation,
// the fingerprint string itself.
func TestHashAllocs(t *testing.T) {
	body := []byte(`{"amount":1000,"currency":"eur","customer":"cus_123"}`)
	if n := testing.AllocsPerRun(100, func() { idem.HashStrings("POST", "/charges", "sha256:0123") }); n > 1 {
		t.Errorf("HashStrings: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { idem.HashBytes(body) }); n > 1 {
		t.Errorf("HashBytes: %v allocations", n)
	}
	// The canonical form goes into a pooled buffer.
	if n := testing.AllocsPerRun(100, func() { idem.HashJSONBytes(body) }); n > 1 && !raceEnabled {
		t.Errorf("HashJSONBytes: %v allocations", n)
	}
}

// TestHashRequest holds HashRequest to what FingerprintBody computed before
// it: the three hashes composed, for JSON, for bodies that are not
// canonicalizable and for targets too long for its stack buffer.
func TestHashRequest(t *testing.T) {
	long := "/charges?" + strings.Repeat("q=1&", 80)
	for _, c := range []struct {
		target, body string
		json         bool
	}{
		{"/charges", `{"currency":"eur", "amount":1000}`, true},
		{"/charges", `{"amount":1000,"amount":1}`, true}, // duplicate key: raw bytes
		{"/charges", `amount=1000`, false},
		{long, `{"b":1,"a":2}`, true},
		{"/charges", ``, false},
	} {
		digest := ""
		if c.json {
			digest, _ = idem.HashJSONBytes([]byte(c.body))
		}
		if digest == "" {
			digest = idem.HashBytes([]byte(c.body))
		}
		want := idem.HashParts([]byte("POST"), []byte(c.target), []byte(digest))
		if got := idem.HashRequest("POST", c.target, []byte(c.body), c.json); got != want {
			t.Errorf("HashRequest(%q, %q) = %s, want %s", c.target, c.body, got, want)
		}
	}
	body := []byte(`{"amount":1000,"currency":"eur","customer":"cus_123"}`)
	if n := testing.AllocsPerRun(100, func() { idem.HashRequest("POST", "/charges", body, true) }); n > 1 && !raceEnabled {
		t.Errorf("HashRequest: %v allocations, want the fingerprint only", n)
	}
}
