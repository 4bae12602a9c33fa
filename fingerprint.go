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
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Fingerprints identify what makes a request what it is. A key reused with a
// different fingerprint is a conflict, never a replay. They are written
// "sha256:<hex>", naming the hash, so that a record read by another tool
// says how it was made.

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
	return fingerprintString(&sum)
}

// HashParts returns one fingerprint of several parts (method, target, body
// hash...). Each part is length-prefixed, so ("ab", "c") and ("a", "bc")
// differ.
//
// Parts that fit are framed in a buffer on the stack and hashed in one
// call, so that the fingerprint string is the only allocation; larger ones
// go through a hash.Hash, written to part by part.
func HashParts(parts ...[]byte) string {
	// A string view of each part, not a copy: the bytes are only read.
	return hashFramed(len(parts), func(i int) string { return unsafe.String(unsafe.SliceData(parts[i]), len(parts[i])) })
}

// HashStrings is HashParts of string parts (HashStrings("a", "b") equals
// HashParts([]byte("a"), []byte("b"))), without copying them.
func HashStrings(parts ...string) string {
	return hashFramed(len(parts), func(i int) string { return parts[i] })
}

// hashFramed hashes n parts, each framed by its length, as HashParts says.
func hashFramed(n int, part func(i int) string) string {
	var buf [256]byte
	var sum [sha256.Size]byte
	if size := framedLen(n, func(i int) int { return len(part(i)) }); size <= len(buf) {
		size = 0
		for i := range n {
			p := part(i)
			binary.BigEndian.PutUint64(buf[size:], uint64(len(p)))
			size += 8 + copy(buf[size+8:], p)
		}
		sum = sha256.Sum256(buf[:size])
		return fingerprintString(&sum)
	}
	h := sha256.New()
	for i := range n {
		p := part(i)
		h.Write(binary.BigEndian.AppendUint64(buf[:0], uint64(len(p))))
		io.WriteString(h, p)
	}
	h.Sum(sum[:0])
	return fingerprintString(&sum)
}

// framedLen is the length of n parts framed for HashParts.
func framedLen(n int, size func(int) int) int {
	total := 8 * n
	for i := range n {
		total += size(i)
	}
	return total
}

// fingerprintString returns "sha256:<hex>" with one allocation, the
// string.
func fingerprintString(sum *[sha256.Size]byte) string {
	var b [len("sha256:") + 2*sha256.Size]byte
	putFingerprint(&b, sum)
	return string(b[:])
}

func putFingerprint(b *[len("sha256:") + 2*sha256.Size]byte, sum *[sha256.Size]byte) {
	copy(b[:], "sha256:")
	hex.Encode(b[len("sha256:"):], sum[:])
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
	bp := canonBufs.Get().(*[]byte)
	defer func() {
		// Only the hash leaves: the buffer is free again.
		if cap(*bp) <= maxPooledCanon {
			canonBufs.Put(bp)
		}
	}()
	c, err := appendCanonical((*bp)[:0], raw)
	if err != nil {
		return "", err
	}
	*bp = c
	return HashBytes(c), nil
}

// canonBufs holds the buffers HashJSONBytes writes canonical forms into;
// maxPooledCanon bounds what a pooled one keeps.
var canonBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledCanon = 64 << 10

// HashRequest returns the fingerprint of an HTTP request: HashStrings of
// its method, its target and the fingerprint of its body, which is
// HashJSONBytes(body) when isJSON and the body canonicalizes, else
// HashBytes(body) (the raw bytes decide, which can only turn a replay into
// a conflict). idemhttp's FingerprintBody is this; it costs one allocation,
// the fingerprint.
func HashRequest(method, target string, body []byte, isJSON bool) string {
	var digest [len("sha256:") + 2*sha256.Size]byte
	ok := false
	if isJSON {
		bp := canonBufs.Get().(*[]byte)
		if c, err := appendCanonical((*bp)[:0], body); err == nil {
			sum := sha256.Sum256(c)
			putFingerprint(&digest, &sum)
			*bp, ok = c, true
		}
		if cap(*bp) <= maxPooledCanon {
			canonBufs.Put(bp)
		}
	}
	if !ok {
		sum := sha256.Sum256(body)
		putFingerprint(&digest, &sum)
	}
	var buf [256]byte
	var sum [sha256.Size]byte
	if n := 3*8 + len(method) + len(target) + len(digest); n <= len(buf) {
		n = 0
		for _, p := range [...]string{method, target} {
			binary.BigEndian.PutUint64(buf[n:], uint64(len(p)))
			n += 8 + copy(buf[n+8:], p)
		}
		binary.BigEndian.PutUint64(buf[n:], uint64(len(digest)))
		n += 8 + copy(buf[n+8:], digest[:])
		sum = sha256.Sum256(buf[:n])
		return fingerprintString(&sum)
	}
	h := sha256.New()
	for _, p := range [...]string{method, target} {
		h.Write(binary.BigEndian.AppendUint64(buf[:0], uint64(len(p))))
		io.WriteString(h, p)
	}
	h.Write(binary.BigEndian.AppendUint64(buf[:0], uint64(len(digest))))
	h.Write(digest[:])
	h.Sum(sum[:0])
	return fingerprintString(&sum)
}

// HashJSONFields returns the fingerprint of the chosen fields of the JSON
// object raw (a payload check on chosen fields). A field is a member
// name, or a dotted path into nested objects ("customer.id"). Missing fields
// are left out, so {} and {"x": null} differ only when "x" is chosen.
func HashJSONFields(raw []byte, fields ...string) (string, error) {
	c, err := CanonicalJSON(raw)
	if err != nil {
		return "", err
	}
	if c[0] != '{' {
		return "", fmt.Errorf("%w: fields chosen but the document is not an object", ErrNotCanonicalizable)
	}
	// Members of a canonical document are canonical too: look the fields
	// up in it and write them as one object.
	out := []byte{'{'}
	n := 0
	for _, f := range slices.Compact(slices.Sorted(slices.Values(fields))) {
		v, ok := lookup(c, strings.Split(f, "."))
		if !ok {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = appendString(out, f)
		out = append(out, ':')
		out = append(out, v...)
	}
	return HashBytes(append(out, '}')), nil
}

// lookup returns the member at path in the canonical object doc.
func lookup(doc []byte, path []string) (json.RawMessage, bool) {
	cur := json.RawMessage(doc)
	for _, name := range path {
		if len(cur) == 0 || cur[0] != '{' {
			return nil, false
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(cur, &m) != nil {
			return nil, false
		}
		v, ok := m[name]
		if !ok {
			return nil, false
		}
		cur = v
	}
	return cur, true
}

// CanonicalJSON returns raw with object members sorted by name, insignificant
// white space removed and strings re-escaped minimally. Numbers keep their
// literal text: 1.0 and 1 stay distinct, because folding them through a
// float would make 9007199254740993 equal 9007199254740992, and a false
// conflict is safe where a false replay is not.
//
// It is a single pass over the bytes rather than encoding/json's tokenizer,
// which measured as the largest cost of the middleware
// (docs/bench/MIDDLEWARE.md);
// the fuzz test holds it to encoding/json's reading of every document.
func CanonicalJSON(raw []byte) ([]byte, error) {
	return appendCanonical(make([]byte, 0, 2*len(raw)), raw) // room to reorder the largest object in place
}

// appendCanonical appends the canonical form of raw to dst.
func appendCanonical(dst, raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) {
		// Decoders replace bad bytes with U+FFFD, making different bodies
		// equal.
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrNotCanonicalizable)
	}
	p := canonParser{b: raw}
	p.space()
	out, err := p.value(dst, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v at offset %d", ErrNotCanonicalizable, err, p.i)
	}
	p.space()
	if p.i != len(p.b) {
		return nil, fmt.Errorf("%w: data after the top-level value at offset %d", ErrNotCanonicalizable, p.i)
	}
	return out, nil
}

type canonParser struct {
	b []byte
	i int
}

var (
	errSyntax    = errors.New("syntax error")
	errEOF       = errors.New("unexpected end of input")
	errDepth     = errors.New("nesting too deep")
	errSurrogate = errors.New("unpaired surrogate escape")
)

func (p *canonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value appends the canonical form of the value at p.i to dst.
func (p *canonParser) value(dst []byte, depth int) ([]byte, error) {
	if p.i >= len(p.b) {
		return dst, errEOF
	}
	switch c := p.b[p.i]; {
	case c == '{':
		if depth >= maxDepth {
			return dst, errDepth
		}
		return p.object(dst, depth)
	case c == '[':
		if depth >= maxDepth {
			return dst, errDepth
		}
		return p.array(dst, depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return dst, err
		}
		return appendString(dst, s), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number(dst)
	case c == 't':
		return p.literal(dst, "true")
	case c == 'f':
		return p.literal(dst, "false")
	case c == 'n':
		return p.literal(dst, "null")
	}
	return dst, errSyntax
}

func (p *canonParser) literal(dst []byte, lit string) ([]byte, error) {
	if !bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
		return dst, errSyntax
	}
	p.i += len(lit)
	return append(dst, lit...), nil
}

type canonMember struct {
	name       []byte // decoded; aliases the input when it has no escapes
	start, end int    // of its canonical `"name":value` in dst
}

// object writes the members in canonical form after dst's end as they
// come. Members already in name order (as many encoders write them) are
// then the object's canonical form as written; otherwise they are appended
// again in name order and that is moved over the first copies: dst is the
// only buffer, and a small object's members are tracked on the stack.
func (p *canonParser) object(dst []byte, depth int) ([]byte, error) {
	p.i++ // {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return append(dst, '{', '}'), nil
	}
	var stack [8]canonMember
	members := stack[:0]
	mark := len(dst)
	dst = append(dst, '{')
	inOrder := true
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return dst, errSyntax
		}
		name, err := p.str()
		if err != nil {
			return dst, err
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return dst, errSyntax
		}
		p.i++
		p.space()
		if len(members) > 0 {
			dst = append(dst, ',')
			inOrder = inOrder && bytes.Compare(members[len(members)-1].name, name) < 0
		}
		start := len(dst)
		dst = appendString(dst, name)
		dst = append(dst, ':')
		if dst, err = p.value(dst, depth+1); err != nil {
			return dst, err
		}
		members = append(members, canonMember{name, start, len(dst)})
		p.space()
		if p.i >= len(p.b) {
			return dst, errEOF
		}
		if p.b[p.i] == '}' {
			p.i++
			break
		}
		if p.b[p.i] != ',' {
			return dst, errSyntax
		}
		p.i++
	}
	if inOrder {
		return append(dst, '}'), nil
	}
	return reorder(dst, mark, members)
}

// reorder appends the members written after dst[mark] again in name order,
// and moves that over the first copies.
func reorder(dst []byte, mark int, members []canonMember) ([]byte, error) {
	slices.SortFunc(members, func(a, b canonMember) int { return bytes.Compare(a.name, b.name) })
	sorted := len(dst)
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			if bytes.Equal(m.name, members[i-1].name) {
				return dst, fmt.Errorf("duplicate object key %q", m.name)
			}
			dst = append(dst, ',')
		}
		dst = append(dst, dst[m.start:m.end]...)
	}
	dst = append(dst, '}')
	n := copy(dst[mark:], dst[sorted:])
	return dst[:mark+n], nil
}

func (p *canonParser) array(dst []byte, depth int) ([]byte, error) {
	p.i++ // [
	dst = append(dst, '[')
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return append(dst, ']'), nil
	}
	for n := 0; ; n++ {
		if n > 0 {
			dst = append(dst, ',')
		}
		p.space()
		var err error
		if dst, err = p.value(dst, depth+1); err != nil {
			return dst, err
		}
		p.space()
		if p.i >= len(p.b) {
			return dst, errEOF
		}
		if p.b[p.i] == ']' {
			p.i++
			return append(dst, ']'), nil
		}
		if p.b[p.i] != ',' {
			return dst, errSyntax
		}
		p.i++
	}
}

// number copies a number literal after checking JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *canonParser) number(dst []byte) ([]byte, error) {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case digits() == 0:
		return dst, errSyntax
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return dst, errSyntax
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return dst, errSyntax
		}
	}
	return append(dst, p.b[start:p.i]...), nil
}

// str reads the string at p.i and returns its decoded value: a slice of
// the input when it has no escapes, which is never written to.
func (p *canonParser) str() ([]byte, error) {
	p.i++ // opening quote
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := p.b[start:p.i:p.i]
			p.i++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return nil, errSyntax
		}
		p.i++
	}
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return buf, nil
		case c < 0x20:
			return nil, errSyntax
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		var err error
		if buf, err = p.escape(buf); err != nil {
			return nil, err
		}
	}
	return nil, errEOF
}

// escape appends to buf the character of the escape sequence at p.i.
func (p *canonParser) escape(buf []byte) ([]byte, error) {
	if p.i+1 >= len(p.b) {
		return nil, errEOF
	}
	e := p.b[p.i+1]
	p.i += 2
	switch e {
	case '"', '\\', '/':
		return append(buf, e), nil
	case 'b':
		return append(buf, '\b'), nil
	case 'f':
		return append(buf, '\f'), nil
	case 'n':
		return append(buf, '\n'), nil
	case 'r':
		return append(buf, '\r'), nil
	case 't':
		return append(buf, '\t'), nil
	case 'u':
		r, err := p.unicodeEscape()
		if err != nil {
			return nil, err
		}
		return utf8.AppendRune(buf, r), nil
	}
	return nil, errSyntax
}

// unicodeEscape reads the four hex digits after \u at p.i, and the low
// surrogate's escape after a high one.
func (p *canonParser) unicodeEscape() (rune, error) {
	r, ok := p.hex4()
	if !ok {
		return 0, errSyntax
	}
	switch {
	case r >= 0xD800 && r < 0xDC00:
		// A high surrogate must be followed by an escaped low one; a
		// decoder would turn a lone one into U+FFFD, making "\ud800"
		// equal "\udc00".
		if p.i+1 >= len(p.b) || p.b[p.i] != '\\' || p.b[p.i+1] != 'u' {
			return 0, errSurrogate
		}
		p.i += 2
		lo, ok := p.hex4()
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return 0, errSurrogate
		}
		return utf16.DecodeRune(r, lo), nil
	case r >= 0xDC00 && r <= 0xDFFF:
		return 0, errSurrogate
	}
	return r, nil
}

func (p *canonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
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
	p.i += 4
	return r, true
}

// appendString escapes only what JSON requires (RFC 8785's rule), so
// "\u0041" and "A" encode alike.
func appendString[S ~[]byte | ~string](b []byte, s S) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	plain := 0 // s[plain:i] needs no escape: copied in one append
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[plain:i]...)
		plain = i + 1
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
	}
	b = append(b, s[plain:]...)
	return append(b, '"')
}
