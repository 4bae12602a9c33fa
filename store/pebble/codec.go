package pebblestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/wire"
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
	recPrefix   = []byte("r/")
	expPrefix   = []byte("x/")
	formatKey   = []byte("m/format")
	formatValue = []byte{1}
)

// The record formats: 2 adds the lease and the run to 1, which was
// written before the store kept its own clock.
const (
	recordV1 = byte(1)
	recordV2 = byte(2)
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

// meta is what a record carries besides store.Record's fields.
type meta struct {
	// lease is the length of the lease that the last reservation or
	// renewal asked for (LeaseUntil - UpdatedAt in format 1: exact for a
	// record never renewed, longer for one that was).
	lease time.Duration
	// run is the Open of the store that wrote the record (0 in format
	// 1): a record in progress of another run has lost its holder.
	run uint64
}

// encodeRecord encodes r in format 2: a format byte, the strings as
// length-prefixed fields, the token, the times (appendTime), the lease in
// nanoseconds and the run (8 bytes each), and the value last. KeyHash is
// not stored: it is the record's key.
func encodeRecord(r *store.Record, m meta) []byte {
	size := 64 + len(r.Scope) + len(r.Key) + len(r.Fingerprint) + len(r.Binding) +
		len(r.State) + len(r.RequestID) + 4*12 + 16 + len(r.Value)
	b := append(make([]byte, 0, size), recordV2)
	for _, s := range []string{r.Scope, r.Key, r.Fingerprint, r.Binding, string(r.State), r.RequestID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, r.Token)
	for _, t := range []time.Time{r.CreatedAt, r.UpdatedAt, r.ExpiresAt, r.LeaseUntil} {
		b = appendTime(b, t)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(m.lease))
	b = binary.BigEndian.AppendUint64(b, m.run)
	b = binary.AppendUvarint(b, uint64(len(r.Value)))
	return append(b, r.Value...)
}

// decodeRecord is the inverse of encodeRecord, and reads format 1 too.
// The returned record shares nothing with data, which Pebble reuses.
func decodeRecord(keyHash string, data []byte) (*store.Record, meta, error) {
	var m meta
	d := wire.Reader{B: data}
	v := d.Byte()
	if v != recordV1 && v != recordV2 {
		return nil, m, fmt.Errorf("%w %s: format %d", ErrCorrupt, keyHash, v)
	}
	r := &store.Record{KeyHash: keyHash}
	for _, s := range []*string{&r.Scope, &r.Key, &r.Fingerprint, &r.Binding, (*string)(&r.State), &r.RequestID} {
		*s = string(d.Bytes(d.Uvarint()))
	}
	r.Token = binary.BigEndian.Uint64(d.Bytes(8))
	for _, t := range []*time.Time{&r.CreatedAt, &r.UpdatedAt, &r.ExpiresAt, &r.LeaseUntil} {
		*t = parseTime(d.Bytes(12))
	}
	if v == recordV1 {
		m.lease = r.LeaseUntil.Sub(r.UpdatedAt)
	} else {
		m.lease = time.Duration(binary.BigEndian.Uint64(d.Bytes(8)))
		m.run = binary.BigEndian.Uint64(d.Bytes(8))
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
		return nil, m, fmt.Errorf("%w %s: %v", ErrCorrupt, keyHash, d.Err)
	}
	return r, m, nil
}
