package wire_test

import (
	"encoding/binary"
	"testing"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store/internal/wire"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// record encodes what a store writes: a state byte, a length-prefixed key
// and a token.
func record(state byte, key string, token uint64) []byte {
	b := []byte{state}
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return binary.AppendUvarint(b, token)
}

func TestReaderReadsFields(t *testing.T) {
	t.Parallel()
	d := wire.Reader{B: record(2, "charge-42", 1<<40)}
	state, key, token := d.Byte(), string(d.Bytes(d.Uvarint())), d.Uvarint()
	if d.Err != nil || state != 2 || key != "charge-42" || token != 1<<40 || len(d.B) != 0 {
		t.Fatalf("read %d %q %d, %d left, %v", state, key, token, len(d.B), d.Err)
	}
}

// TestReaderShortRecord: a record cut anywhere (a torn write at the log's
// tail) sets Err, and every later read returns zero values without
// panicking, so a decoder reads on and checks Err once.
func TestReaderShortRecord(t *testing.T) {
	t.Parallel()
	full := record(2, "charge-42", 1<<40)
	for cut := range len(full) {
		d := wire.Reader{B: full[:cut]}
		d.Byte()
		k := d.Bytes(d.Uvarint())
		tok := d.Uvarint()
		if d.Err == nil {
			t.Fatalf("cut at %d: no error", cut)
		}
		if tok != 0 || d.Uvarint() != 0 || d.Byte() != 0 {
			t.Fatalf("cut at %d: reads after the error are not zero", cut)
		}
		if len(k) > 12 {
			t.Fatalf("cut at %d: a short read returned %d bytes", cut, len(k))
		}
	}
}

// TestReaderHugeLength: a corrupt length does not make the reader
// allocate it.
func TestReaderHugeLength(t *testing.T) {
	t.Parallel()
	d := wire.Reader{B: binary.AppendUvarint(nil, 1<<62)}
	if b := d.Bytes(d.Uvarint()); d.Err == nil || len(b) > 12 {
		t.Fatalf("huge length: %d bytes, %v", len(b), d.Err)
	}
	d = wire.Reader{B: []byte{0xff, 0xff}} // a varint that never ends
	if d.Uvarint(); d.Err == nil {
		t.Fatal("unterminated varint: no error")
	}
}

func TestReaderVarint(t *testing.T) {
	t.Parallel()
	var b []byte
	for _, v := range []int64{0, -1, 1, -1 << 40, 1 << 62} {
		b = binary.AppendVarint(b, v)
	}
	d := wire.Reader{B: b}
	for _, want := range []int64{0, -1, 1, -1 << 40, 1 << 62} {
		if got := d.Varint(); got != want {
			t.Fatalf("Varint = %d, want %d", got, want)
		}
	}
	if d.Varint(); d.Err == nil {
		t.Fatal("reading past the end set no error")
	}
}
