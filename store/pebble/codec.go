package pebblestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/idem-dev/idem/internal/wire"
	"github.com/idem-dev/idem/store"
)

// The key space. Every key starts with a one-letter table name:
//
//	r/<keyhash>                       the record (encodeRecord)
//	x/<expiresAt, 12 bytes>/<keyhash> the expiry index, empty value
//	m/format                          the on-disk format version
//
// The expiry index sorts by time, so Cleanup scans only the entries that
// are due. Raw keys are never part of a key.
var (
	recPrefix    = []byte("r/")
	expPrefix    = []byte("x/")
	formatKey    = []byte("m/format")
	formatValue  = []byte{1}
	recordFormat = byte(1)
)

// ErrCorrupt reports a record or key that does not decode: the directory
// was written by something else, or damaged outside the engine's checks.
var ErrCorrupt = errors.New("pebble: corrupt data")

func recKey(keyHash string) []byte {
	return append(append(make([]byte, 0, len(recPrefix)+len(keyHash)), recPrefix...), keyHash...)
}

// appendTime encodes t in 12 bytes whose byte order is time order: seconds
// with the sign bit flipped, then nanoseconds, both big-endian. Unlike
// UnixNano it covers every year a time.Time can hold, the zero time too.
func appendTime(b []byte, t time.Time) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(t.Unix())^(1<<63))
	return binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
}

// parseTime decodes appendTime's 12 bytes, in UTC.
func parseTime(b []byte) time.Time {
	sec := int64(binary.BigEndian.Uint64(b[:8]) ^ (1 << 63))
	return time.Unix(sec, int64(binary.BigEndian.Uint32(b[8:12]))).UTC()
}

func expKey(expiresAt time.Time, keyHash string) []byte {
	b := make([]byte, 0, len(expPrefix)+13+len(keyHash))
	b = appendTime(append(b, expPrefix...), expiresAt)
	return append(append(b, '/'), keyHash...)
}

// parseExpKey splits an expiry index key.
func parseExpKey(k []byte) (time.Time, string, bool) {
	const n = 2 + 12 + 1
	if len(k) < n || string(k[:2]) != string(expPrefix) || k[n-1] != '/' {
		return time.Time{}, "", false
	}
	return parseTime(k[2:14]), string(k[n:]), true
}

// encodeRecord encodes r in format 1: a format byte, the strings as
// length-prefixed fields, the token, the times (appendTime), and the value
// last. KeyHash is not stored: it is the record's key.
func encodeRecord(r *store.Record) []byte {
	size := 64 + len(r.Scope) + len(r.Key) + len(r.Fingerprint) + len(r.Binding) +
		len(r.State) + len(r.RequestID) + 4*12 + len(r.Value)
	b := append(make([]byte, 0, size), recordFormat)
	for _, s := range []string{r.Scope, r.Key, r.Fingerprint, r.Binding, string(r.State), r.RequestID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, r.Token)
	for _, t := range []time.Time{r.CreatedAt, r.UpdatedAt, r.ExpiresAt, r.LeaseUntil} {
		b = appendTime(b, t)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Value)))
	return append(b, r.Value...)
}

// decodeRecord is the inverse of encodeRecord. The returned record shares
// nothing with data, which Pebble reuses.
func decodeRecord(keyHash string, data []byte) (*store.Record, error) {
	d := wire.Reader{B: data}
	if v := d.Byte(); v != recordFormat {
		return nil, fmt.Errorf("%w %s: format %d", ErrCorrupt, keyHash, v)
	}
	r := &store.Record{KeyHash: keyHash}
	for _, s := range []*string{&r.Scope, &r.Key, &r.Fingerprint, &r.Binding, (*string)(&r.State), &r.RequestID} {
		*s = string(d.Bytes(d.Uvarint()))
	}
	r.Token = binary.BigEndian.Uint64(d.Bytes(8))
	for _, t := range []*time.Time{&r.CreatedAt, &r.UpdatedAt, &r.ExpiresAt, &r.LeaseUntil} {
		*t = parseTime(d.Bytes(12))
	}
	if n := d.Uvarint(); n > 0 {
		r.Value = append([]byte(nil), d.Bytes(n)...)
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = errors.New("trailing bytes")
	}
	if d.Err == nil && !r.State.Valid() {
		d.Err = fmt.Errorf("state %q", r.State)
	}
	if d.Err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorrupt, keyHash, d.Err)
	}
	return r, nil
}
