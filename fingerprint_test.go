package idem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idem-dev/idem"
)

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{" {\n \"a\" : [ 1 , 2 ] ,\t\"b\":{\"d\":null,\"c\":true}}\n", `{"a":[1,2],"b":{"c":true,"d":null}}`},
		{`"\u0041\u00fc\/"`, `"Aü/"`},
		{`"line\nbreak\u0001"`, `"line\nbreak\u0001"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`[1.0, 1, 1e2, -0]`, `[1.0,1,1e2,-0]`}, // numbers keep their text
		{`12345678901234567890123`, `12345678901234567890123`},
		{`[]`, `[]`}, {`{}`, `{}`}, {`null`, `null`}, {`""`, `""`},
		{`"<&>"`, `"<&>"`}, // no HTML escaping
	}
	for _, c := range cases {
		got, err := idem.CanonicalJSON([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("CanonicalJSON(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1,"a":2}`, `{"a":1}{}`, `[1,]`, "\"\xff\"", `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `nul`, strings.Repeat("[", 600) + strings.Repeat("]", 600)} {
		if _, err := idem.CanonicalJSON([]byte(bad)); !errors.Is(err, idem.ErrNotCanonicalizable) {
			t.Errorf("CanonicalJSON(%.40q): %v, want ErrNotCanonicalizable", bad, err)
		}
	}
}

func TestHashes(t *testing.T) {
	t.Parallel()
	a, _ := idem.HashJSON(map[string]any{"amount": 1000, "currency": "eur"})
	b, _ := idem.HashJSONBytes([]byte(`{ "currency": "eur", "amount": 1000 }`))
	if a != b || !strings.HasPrefix(a, "sha256:") || len(a) != 7+64 {
		t.Fatalf("HashJSON %s, HashJSONBytes %s", a, b)
	}
	if _, err := idem.HashJSON(make(chan int)); err == nil {
		t.Fatal("HashJSON of a channel: no error")
	}
	if idem.HashParts([]byte("ab"), []byte("c")) == idem.HashParts([]byte("a"), []byte("bc")) {
		t.Fatal("HashParts is ambiguous")
	}
	// Fields: chosen ones only, nested paths, missing ones left out.
	doc := []byte(`{"stepId":"s1","meta":{"device":"ios","ts":1},"answerValue":3}`)
	f1, err := idem.HashJSONFields(doc, "answerValue", "meta.device", "stepId")
	if err != nil {
		t.Fatal(err)
	}
	f2, _ := idem.HashJSONFields([]byte(`{"answerValue":3,"stepId":"s1","meta":{"ts":2,"device":"ios"},"extra":1}`), "stepId", "meta.device", "answerValue")
	f3, _ := idem.HashJSONFields([]byte(`{"answerValue":4,"stepId":"s1","meta":{"device":"ios"}}`), "stepId", "meta.device", "answerValue")
	f4, _ := idem.HashJSONFields([]byte(`{"stepId":"s1","meta":{"device":"ios"}}`), "stepId", "meta.device", "answerValue")
	if f1 != f2 || f1 == f3 || f1 == f4 || f3 == f4 {
		t.Fatalf("fields: %s %s %s %s", f1, f2, f3, f4)
	}
	if _, err := idem.HashJSONFields([]byte(`[1]`), "a"); !errors.Is(err, idem.ErrNotCanonicalizable) {
		t.Fatalf("fields of an array: %v", err)
	}
}

// FuzzCanonicalJSON checks that canonical JSON is valid, stable, means the
// same as its input, and that inputs meaning different things never share a
// canonical form.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,false,null,"x\u00fc"]}`, `[1.5e10,-0,0.1]`, `"\ud83d\ude00"`,
		`{"a":{"b":{"c":[]}}}`, `{"a":1,"a":1}`, ` 7 `, `"\\u0041"`, `{"":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := idem.CanonicalJSON(raw)
		if err != nil {
			if !errors.Is(err, idem.ErrNotCanonicalizable) {
				t.Fatalf("error %v does not match ErrNotCanonicalizable", err)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("canonical form %q of %q is not valid JSON", out, raw)
		}
		again, err := idem.CanonicalJSON(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not stable: %q -> %q -> %q (%v)", raw, out, again, err)
		}
		var a, b any
		decode := func(p []byte, v *any) {
			d := json.NewDecoder(bytes.NewReader(p))
			d.UseNumber()
			if err := d.Decode(v); err != nil {
				t.Fatalf("decode %q: %v", p, err)
			}
		}
		decode(raw, &a)
		decode(out, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("meaning changed: %q -> %q", raw, out)
		}
		// White space around the document never matters.
		padded, err := idem.CanonicalJSON(append(append([]byte(" \n"), raw...), '\t'))
		if err != nil || !bytes.Equal(padded, out) {
			t.Fatalf("padding changed the canonical form of %q", raw)
		}
	})
}

// FuzzValidateKey checks that accepted keys are trimmed, bounded, printable
// and stable, and that nothing panics.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"550e8400-e29b-41d4-a716-446655440000", " k ", "", "\x00", "ü", "a\u2028b", strings.Repeat("x", 256)} {
		f.Add(s, 0)
	}
	f.Add("abc", 2)
	f.Fuzz(func(t *testing.T, key string, max int) {
		if max > 1<<16 || max < -1 {
			max = 0
		}
		got, err := idem.ValidateKey(key, max)
		limit := max
		if limit <= 0 {
			limit = idem.DefaultMaxKeyBytes
		}
		if err != nil {
			if !errors.Is(err, idem.ErrInvalidKey) || got != "" {
				t.Fatalf("ValidateKey(%q): %q, %v", key, got, err)
			}
			return
		}
		if got == "" || len(got) > limit || !utf8.ValidString(got) || strings.TrimSpace(got) != got {
			t.Fatalf("ValidateKey(%q) accepted %q", key, got)
		}
		if !strings.Contains(key, got) {
			t.Fatalf("ValidateKey(%q) = %q is not a part of the key", key, got)
		}
		for _, r := range got {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				t.Fatalf("ValidateKey(%q) kept control character %U", key, r)
			}
		}
		if again, err := idem.ValidateKey(got, max); err != nil || again != got {
			t.Fatalf("not stable: %q -> %q, %v", got, again, err)
		}
	})
}

// BenchmarkHashRequest is a request's fingerprint: a body whose members
// come in name order (as Go's and many encoders write them), one that
// must be sorted, and a body that is not JSON, hashed as it is.
func BenchmarkHashRequest(b *testing.B) {
	for _, c := range []struct {
		name, body string
		json       bool
	}{
		{"in order", `{"amount":1000,"currency":"eur","customer":"cus_123"}`, true},
		{"to sort", `{"customer":"cus_123","currency":"eur","amount":1000,"metadata":{"order_id":"6735","note":"two pairs of socks"}}`, true},
		{"raw", `amount=1000&currency=eur&customer=cus_123`, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			body := []byte(c.body)
			for b.Loop() {
				idem.HashRequest("POST", "/charges", body, c.json)
			}
		})
	}
}
