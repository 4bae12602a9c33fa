package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// Fingerprints identify what makes a request what it is. A key reused with a
// different fingerprint is a conflict, never a replay. They are written
// "sha256:<hex>", as seed 004's input_hash.

// ErrNotCanonicalizable is returned for JSON that has no single meaning:
// syntax errors, invalid UTF-8, duplicate object keys, nesting deeper than
// 512. Callers usually fall back to hashing the raw bytes, which is never
// wrong: it can only turn a replay into a conflict, not the other way round.
var ErrNotCanonicalizable = errors.New("idem: JSON cannot be canonicalized")

// maxDepth bounds nesting so hostile bodies cannot exhaust the stack.
const maxDepth = 512

// HashBytes returns the fingerprint of b.
func HashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// HashParts returns one fingerprint of several parts (method, target, body
// hash...). Each part is length-prefixed, so ("ab", "c") and ("a", "bc")
// differ.
func HashParts(parts ...[]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// HashJSON returns the fingerprint of v encoded as canonical JSON.
func HashJSON(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("idem: HashJSON: %w", err)
	}
	return HashJSONBytes(raw)
}

// HashJSONBytes returns the fingerprint of the canonical form of the JSON
// document raw, so that key order and white space do not matter.
func HashJSONBytes(raw []byte) (string, error) {
	c, err := CanonicalJSON(raw)
	if err != nil {
		return "", err
	}
	return HashBytes(c), nil
}

// HashJSONFields returns the fingerprint of the chosen fields of the JSON
// object raw (seed 001's per-endpoint payload check). A field is a member
// name, or a dotted path into nested objects ("customer.id"). Missing fields
// are left out, so {} and {"x": null} differ only when "x" is chosen.
func HashJSONFields(raw []byte, fields ...string) (string, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return "", err
	}
	if v.kind != '{' {
		return "", fmt.Errorf("%w: fields chosen but the document is not an object", ErrNotCanonicalizable)
	}
	sub := jsonValue{kind: '{'}
	for _, f := range slices.Compact(slices.Sorted(slices.Values(fields))) {
		if fv, ok := v.path(strings.Split(f, ".")); ok {
			sub.obj = append(sub.obj, member{name: f, val: fv})
		}
	}
	var b bytes.Buffer
	sub.encode(&b)
	return HashBytes(b.Bytes()), nil
}

// CanonicalJSON returns raw with object members sorted by name, insignificant
// white space removed and strings re-escaped minimally. Numbers keep their
// literal text: 1.0 and 1 stay distinct, because folding them through a
// float would make 9007199254740993 equal 9007199254740992, and a false
// conflict is safe where a false replay is not.
func CanonicalJSON(raw []byte) ([]byte, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Grow(len(raw))
	v.encode(&b)
	return b.Bytes(), nil
}

type jsonValue struct {
	kind byte   // '{', '[', '"', 'n' (number), 't', 'f', '0' (null)
	text string // string value or number literal
	arr  []jsonValue
	obj  []member
}

type member struct {
	name string
	val  jsonValue
}

func (v *jsonValue) path(p []string) (jsonValue, bool) {
	cur := *v
	for _, name := range p {
		if cur.kind != '{' {
			return jsonValue{}, false
		}
		i, ok := slices.BinarySearchFunc(cur.obj, name, func(m member, n string) int { return strings.Compare(m.name, n) })
		if !ok {
			return jsonValue{}, false
		}
		cur = cur.obj[i].val
	}
	return cur, true
}

func parseJSON(raw []byte) (jsonValue, error) {
	if !utf8.Valid(raw) {
		// The decoder would replace bad bytes with U+FFFD, making different
		// bodies equal.
		return jsonValue{}, fmt.Errorf("%w: invalid UTF-8", ErrNotCanonicalizable)
	}
	if err := checkSurrogates(raw); err != nil {
		return jsonValue{}, err
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	v, err := parseValue(d, 0)
	if err != nil {
		return jsonValue{}, fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return jsonValue{}, fmt.Errorf("%w: data after the top-level value", ErrNotCanonicalizable)
	}
	return v, nil
}

func parseValue(d *json.Decoder, depth int) (jsonValue, error) {
	tok, err := d.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return jsonValue{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxDepth {
			return jsonValue{}, errors.New("nesting too deep")
		}
		switch t {
		case '{':
			v := jsonValue{kind: '{'}
			for d.More() {
				nt, err := d.Token()
				if err != nil {
					return jsonValue{}, err
				}
				name, ok := nt.(string)
				if !ok {
					return jsonValue{}, errors.New("object key is not a string")
				}
				mv, err := parseValue(d, depth+1)
				if err != nil {
					return jsonValue{}, err
				}
				v.obj = append(v.obj, member{name: name, val: mv})
			}
			if _, err := d.Token(); err != nil {
				return jsonValue{}, err
			}
			slices.SortStableFunc(v.obj, func(a, b member) int { return strings.Compare(a.name, b.name) })
			for i := 1; i < len(v.obj); i++ {
				if v.obj[i].name == v.obj[i-1].name {
					return jsonValue{}, fmt.Errorf("duplicate object key %q", v.obj[i].name)
				}
			}
			return v, nil
		case '[':
			v := jsonValue{kind: '['}
			for d.More() {
				ev, err := parseValue(d, depth+1)
				if err != nil {
					return jsonValue{}, err
				}
				v.arr = append(v.arr, ev)
			}
			if _, err := d.Token(); err != nil {
				return jsonValue{}, err
			}
			return v, nil
		}
		return jsonValue{}, fmt.Errorf("unexpected %v", t)
	case string:
		return jsonValue{kind: '"', text: t}, nil
	case json.Number:
		return jsonValue{kind: 'n', text: string(t)}, nil
	case bool:
		if t {
			return jsonValue{kind: 't'}, nil
		}
		return jsonValue{kind: 'f'}, nil
	case nil:
		return jsonValue{kind: '0'}, nil
	}
	return jsonValue{}, fmt.Errorf("unexpected token %v", tok)
}

func (v *jsonValue) encode(b *bytes.Buffer) {
	switch v.kind {
	case '{':
		b.WriteByte('{')
		for i := range v.obj {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, v.obj[i].name)
			b.WriteByte(':')
			v.obj[i].val.encode(b)
		}
		b.WriteByte('}')
	case '[':
		b.WriteByte('[')
		for i := range v.arr {
			if i > 0 {
				b.WriteByte(',')
			}
			v.arr[i].encode(b)
		}
		b.WriteByte(']')
	case '"':
		writeString(b, v.text)
	case 'n':
		b.WriteString(v.text)
	case 't':
		b.WriteString("true")
	case 'f':
		b.WriteString("false")
	default:
		b.WriteString("null")
	}
}

// writeString escapes only what JSON requires (RFC 8785's rule), so "\u0041"
// and "A" encode alike.
func writeString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// checkSurrogates rejects \u escapes of unpaired UTF-16 surrogates, which
// the decoder would turn into U+FFFD, making "\ud800" equal "\udc00".
func checkSurrogates(raw []byte) error {
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+5 >= len(raw) || raw[i+1] != 'u' {
				i++ // an escaped character; syntax is the decoder's job
				continue
			}
			r, ok := hex4(raw[i+2 : i+6])
			switch {
			case !ok:
			case r >= 0xD800 && r < 0xDC00:
				if i+11 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
					return fmt.Errorf("%w: unpaired surrogate escape", ErrNotCanonicalizable)
				}
				if lo, ok := hex4(raw[i+8 : i+12]); !ok || lo < 0xDC00 || lo > 0xDFFF {
					return fmt.Errorf("%w: unpaired surrogate escape", ErrNotCanonicalizable)
				}
				i += 6
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf("%w: unpaired surrogate escape", ErrNotCanonicalizable)
			}
			i += 5
		}
	}
	return nil
}

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
