package file

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/wire"
)

// A segment is a header, then frames, each one log entry:
//
//	header  "IDEMLOG" 0x01
//	frame   length uint32 | crc32c(body) uint32 | body
//	body    kind byte | seq uint64 | keyhash [32]byte | payload
//	put     payload = the record, its value last
//	delete  payload = nothing: the key's record was released
//	record  format byte (2) | scope, key, fingerprint, binding, state,
//	        request ID (uvarint length, bytes) | token uint64 |
//	        created, updated, expires, lease-until (12 bytes each) |
//	        lease int64 ns | value (uvarint length, bytes)
//
// All integers are big-endian. seq orders the entries of one key: the
// entry with the highest seq is the key's state, wherever it lies, so an
// entry keeps its seq when compaction copies it forward. The raw key is
// inside the record, never in an index.
//
// lease is the length of the lease that the last reservation or renewal
// asked for: recovery holds a record left in progress by a process that
// died to at most that long from the reopen (see recover), whatever the
// wall clock did in between. Format 1, written before the store kept its
// own clock, has no lease field: its lease is read as LeaseUntil -
// UpdatedAt, exact for a record that was never renewed, longer for one
// that was.
//
// A delete of the zero key hash is a no-op frame: Store.Writable writes
// one to find out whether the log can write again.
const (
	kindPut byte = 1
	kindDel byte = 2

	frameHeader = 8          // length + crc
	bodyHeader  = 1 + 8 + 32 // kind + seq + keyhash
	maxBody     = 64 << 20   // a frame longer than this is damage, not data
	recordV1    = byte(1)
	recordV2    = byte(2)
)

var segmentMagic = []byte("IDEMLOG\x01")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt reports a segment or record that does not decode: the
// directory was written by something else, or damaged outside the store.
var ErrCorrupt = errors.New("file: corrupt data")

// keyID is a record's identity in memory: the 32 bytes behind its hex
// KeyHash.
type keyID [32]byte

func parseKeyHash(h string) (keyID, error) {
	var id keyID
	if len(h) != 64 {
		return id, fmt.Errorf("file: key hash %q: want 64 hex digits", h)
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return id, fmt.Errorf("file: key hash %q: %v", h, err)
	}
	return id, nil
}

// appendTime encodes t in 12 bytes: seconds then nanoseconds. Unlike
// UnixNano it covers every year a time.Time can hold, the zero time too.
func appendTime(b []byte, t time.Time) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(t.Unix()))
	return binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
}

func parseTime(b []byte) time.Time {
	return time.Unix(int64(binary.BigEndian.Uint64(b[:8])), int64(binary.BigEndian.Uint32(b[8:12]))).UTC()
}

// appendFrame appends one entry's frame to b and returns it with the
// offset of the record's value inside the frame (0 for a delete). lease is
// the length of the lease r's LeaseUntil was set from (0 for a record not
// in progress).
func appendFrame(b []byte, kind byte, seq uint64, id keyID, r *store.Record, lease time.Duration) ([]byte, int) {
	start := len(b)
	b = append(b, make([]byte, frameHeader)...)
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = append(b, id[:]...)
	valAt := 0
	if kind == kindPut {
		b = append(b, recordV2)
		for _, s := range [...]string{r.Scope, r.Key, r.Fingerprint, r.Binding, string(r.State), r.RequestID} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		b = binary.BigEndian.AppendUint64(b, r.Token)
		for _, t := range [...]time.Time{r.CreatedAt, r.UpdatedAt, r.ExpiresAt, r.LeaseUntil} {
			b = appendTime(b, t)
		}
		b = binary.BigEndian.AppendUint64(b, uint64(lease))
		b = binary.AppendUvarint(b, uint64(len(r.Value)))
		valAt = len(b) - start
		b = append(b, r.Value...)
	}
	body := b[start+frameHeader:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
	return b, valAt
}

// frame is a decoded entry. For a put, rec holds the record without its
// value, which stays on disk at valAt (relative to the frame) for valLen
// bytes.
type frame struct {
	kind   byte
	seq    uint64
	id     keyID
	rec    store.Record
	lease  time.Duration // the lease LeaseUntil was set from
	valAt  int
	valLen int
}

// decodeHead decodes the start of a frame's body (its checksum already
// verified): its kind, sequence number and key, and for a put a reader at
// the record that follows, whose format is v.
func decodeHead(body []byte) (kind byte, seq uint64, id keyID, d wire.Reader, v byte, err error) {
	if len(body) < bodyHeader {
		return 0, 0, id, d, 0, fmt.Errorf("%w: short entry", ErrCorrupt)
	}
	kind = body[0]
	seq = binary.BigEndian.Uint64(body[1:9])
	copy(id[:], body[9:41])
	switch kind {
	case kindDel:
		return kind, seq, id, d, 0, nil
	case kindPut:
	default:
		return kind, seq, id, d, 0, fmt.Errorf("%w: entry kind %d", ErrCorrupt, kind)
	}
	d = wire.Reader{B: body[bodyHeader:]}
	v = d.Byte()
	if v != recordV1 && v != recordV2 {
		return kind, seq, id, d, v, fmt.Errorf("%w: record format %d", ErrCorrupt, v)
	}
	return kind, seq, id, d, v, nil
}

// decodeBody decodes a frame's body (its checksum already verified).
func decodeBody(body []byte) (frame, error) {
	var f frame
	var d wire.Reader
	var v byte
	var err error
	f.kind, f.seq, f.id, d, v, err = decodeHead(body)
	if err != nil || f.kind == kindDel {
		return f, err
	}
	r := &f.rec
	r.KeyHash = hex.EncodeToString(f.id[:])
	// The six strings share one allocation: the record's text, copied
	// once, then sliced (a replay reads every record it answers with).
	var spans [6][2]int
	from := len(d.B)
	for i := range spans {
		n := d.Uvarint()
		spans[i][0] = from - len(d.B)
		d.Bytes(n)
		spans[i][1] = from - len(d.B)
	}
	if d.Err == nil {
		text := string(body[len(body)-from : len(body)-len(d.B)])
		for i, s := range [...]*string{&r.Scope, &r.Key, &r.Fingerprint, &r.Binding, (*string)(&r.State), &r.RequestID} {
			*s = text[spans[i][0]:spans[i][1]]
		}
	}
	r.Token = binary.BigEndian.Uint64(d.Bytes(8))
	for _, t := range [...]*time.Time{&r.CreatedAt, &r.UpdatedAt, &r.ExpiresAt, &r.LeaseUntil} {
		*t = parseTime(d.Bytes(12))
	}
	if v == recordV1 {
		f.lease = r.LeaseUntil.Sub(r.UpdatedAt)
	} else {
		f.lease = time.Duration(binary.BigEndian.Uint64(d.Bytes(8)))
	}
	f.valLen = int(d.Uvarint())
	f.valAt = frameHeader + len(body) - len(d.B)
	d.Bytes(uint64(f.valLen))
	if d.Err == nil && len(d.B) != 0 {
		d.Err = errors.New("trailing bytes")
	}
	if d.Err == nil && !r.State.Valid() {
		d.Err = fmt.Errorf("state %q", r.State)
	}
	if d.Err != nil {
		return f, fmt.Errorf("%w: record %s: %v", ErrCorrupt, r.KeyHash, d.Err)
	}
	return f, nil
}

// meta is what recovery needs of a frame: the index entry's fields, and
// the lease's length.
type meta struct {
	kind  byte
	seq   uint64
	id    keyID
	state uint8
	exp   int64
	lease int64         // LeaseUntil in Unix nanoseconds
	dur   time.Duration // the lease LeaseUntil was set from
}

// decodeMeta decodes a frame's body (its checksum already verified) as
// decodeBody does, checking it as much, but keeps only what the index
// holds: nothing is allocated, so that recovery reads a log of millions
// of records at the disk's pace.
func decodeMeta(body []byte) (meta, error) {
	var m meta
	var d wire.Reader
	var v byte
	var err error
	m.kind, m.seq, m.id, d, v, err = decodeHead(body)
	if err != nil || m.kind == kindDel {
		return m, err
	}
	for i := range 6 {
		b := d.Bytes(d.Uvarint())
		if i == 4 {
			m.state = stateOfBytes(b)
		}
	}
	d.Bytes(8) // token
	var ts [4]time.Time
	for i := range ts {
		if b := d.Bytes(12); d.Err == nil {
			ts[i] = parseTime(b)
		}
	}
	m.exp, m.lease = nanos(ts[2]), nanos(ts[3])
	if v == recordV1 {
		m.dur = ts[3].Sub(ts[1])
	} else if b := d.Bytes(8); d.Err == nil {
		m.dur = time.Duration(binary.BigEndian.Uint64(b))
	}
	d.Bytes(d.Uvarint())
	if d.Err == nil && len(d.B) != 0 {
		d.Err = errors.New("trailing bytes")
	}
	if d.Err == nil && m.state == stateFree {
		d.Err = errors.New("bad state")
	}
	if d.Err != nil {
		return m, fmt.Errorf("%w: record %x: %v", ErrCorrupt, m.id, d.Err)
	}
	return m, nil
}

func stateOfBytes(b []byte) uint8 {
	for i, s := range states {
		if i > 0 && string(b) == string(s) { // compared, not allocated
			return uint8(i)
		}
	}
	return stateFree
}
