// Package wire reads the length-prefixed binary records that the embedded
// stores write, and the records PostgreSQL's notifications carry.
package wire

import (
	"encoding/binary"
	"errors"
)

// Reader reads fields from B. After the first short read every read returns
// zero values and Err stays set, so a decoder reads all its fields and
// checks Err once.
type Reader struct {
	B   []byte
	Err error
}

// Bytes returns the next n bytes (shared with B).
func (d *Reader) Bytes(n uint64) []byte {
	if d.Err != nil || n > uint64(len(d.B)) {
		if d.Err == nil {
			d.Err = errors.New("short record")
		}
		return make([]byte, min(n, 12))
	}
	p := d.B[:n]
	d.B = d.B[n:]
	return p
}

// Byte returns the next byte.
func (d *Reader) Byte() byte { return d.Bytes(1)[0] }

// Uvarint returns the next unsigned varint.
func (d *Reader) Uvarint() uint64 { return next(d, binary.Uvarint, "bad length") }

// Varint returns the next signed varint (as binary.AppendVarint writes it).
func (d *Reader) Varint() int64 { return next(d, binary.Varint, "bad varint") }

// next decodes the next number with decode, which reports its width as
// encoding/binary's varint decoders do: 0 or less when there is none.
func next[T uint64 | int64](d *Reader, decode func([]byte) (T, int), bad string) T {
	if d.Err != nil {
		return 0
	}
	v, n := decode(d.B)
	if n <= 0 {
		d.Err = errors.New(bad)
		return 0
	}
	d.B = d.B[n:]
	return v
}
