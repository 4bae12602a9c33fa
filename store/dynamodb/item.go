package dynamodbstore

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-dev/idem/store"
)

// The attributes of an item, one per record. Times are milliseconds since
// the Unix epoch on the server's clock, durations milliseconds;
// docs/stores/DYNAMODB.md says what each time means and which ones the
// store judges by.
const (
	attrPK        = "pk"         // S, the hash key: the record's key hash
	attrScope     = "scope"      // S
	attrKey       = "key"        // S, the client's raw key (never indexed)
	attrFP        = "fp"         // S, the request's fingerprint
	attrBinding   = "binding"    // S
	attrState     = "state"      // S: in_progress, succeeded, failed
	attrToken     = "token"      // N, the fencing token
	attrValue     = "value"      // B, the outcome; absent when empty
	attrRequestID = "request_id" // S
	attrVersion   = "ver"        // N, +1 on every write, renewals included
	attrLease     = "lease_ms"   // N, the holder's lease (in_progress)
	attrTTL       = "ttl_ms"     // N, the record's lifetime
	attrCreated   = "created_ms" // N, shown: lower bound of the first write
	attrUpdated   = "updated_ms" // N, shown: lower bound of the last write
	attrFrom      = "from_ms"    // N, shown: lower bound of the write that set ttl_ms
	attrUntil     = "until_ms"   // N, judged: upper bound of that write + ttl_ms
	attrWrite     = "wid"        // S, a random ID of the write, to know one's own
	attrNotStored = "not_stored" // N, the length of a value too large to keep

	// TTLAttribute is the item's expiry for DynamoDB's native TTL, in
	// seconds since the Unix epoch: until_ms rounded up, plus a second.
	// Migrate enables TTL on it where the server can.
	TTLAttribute = "expires"
)

// MaxItemBytes is DynamoDB's limit on an item: 400 KB, counting every
// attribute's name and value. dynalite enforces it too.
const MaxItemBytes = 400 << 10

// MaxValueBytes is the largest value a record keeps whole whatever else it
// holds, as long as its key, scope, fingerprint, binding and request ID
// take less than 8 KiB together (a few hundred bytes in practice). A value
// up to MaxItemBytes is tried, and kept when the item fits; a larger one
// is recorded as not stored (see the package doc).
const MaxValueBytes = MaxItemBytes - 8<<10

// item is a record as stored, with what the store judges it by.
type item struct {
	rec       store.Record // identity, state, token, value, request ID
	version   uint64
	lease     time.Duration
	ttl       time.Duration
	created   time.Time
	updated   time.Time
	from      time.Time
	until     time.Time
	write     string
	notStored int64
}

// expired reports whether the item has expired when the server's clock
// reads at least now: until is an upper bound of its end.
func (it *item) expired(now time.Time) bool { return !now.Before(it.until) }

// versionID names the version of the record for the lease watch: the
// token with the counter, so that a record deleted and made again (its
// counter starting over) is never taken for one watched before.
func (it *item) versionID() string {
	return strconv.FormatUint(it.rec.Token, 10) + "." + strconv.FormatUint(it.version, 10)
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// msUp is t in milliseconds, rounded up: for the upper bounds.
func msUp(t time.Time) string {
	m := t.UnixMilli()
	if t.Sub(time.UnixMilli(m)) > 0 {
		m++
	}
	return strconv.FormatInt(m, 10)
}

// durMS is d in milliseconds, rounded up: a lease or a lifetime is never
// stored shorter than asked.
func durMS(d time.Duration) string {
	m := d.Milliseconds()
	if d > time.Duration(m)*time.Millisecond {
		m++
	}
	return strconv.FormatInt(m, 10)
}

// expiresEpoch is the native TTL attribute for a record judged expired at
// until: whole seconds, after it.
func expiresEpoch(until time.Time) string {
	return strconv.FormatInt(until.Unix()+2, 10)
}

func num(s string) *types.AttributeValueMemberN { return &types.AttributeValueMemberN{Value: s} }
func str(s string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: s} }
func u64(v uint64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatUint(v, 10)}
}

// attrs returns the item as DynamoDB attributes. Empty strings and values
// are left out.
func (it *item) attrs() map[string]types.AttributeValue {
	r := &it.rec
	m := map[string]types.AttributeValue{
		attrPK:       str(r.KeyHash),
		attrState:    str(string(r.State)),
		attrToken:    u64(r.Token),
		attrVersion:  u64(it.version),
		attrTTL:      num(durMS(it.ttl)),
		attrCreated:  num(ms(it.created)),
		attrUpdated:  num(ms(it.updated)),
		attrFrom:     num(ms(it.from)),
		attrUntil:    num(msUp(it.until)),
		TTLAttribute: num(expiresEpoch(it.until)),
	}
	for name, v := range map[string]string{attrScope: r.Scope, attrKey: r.Key, attrFP: r.Fingerprint,
		attrBinding: r.Binding, attrRequestID: r.RequestID, attrWrite: it.write} {
		if v != "" {
			m[name] = str(v)
		}
	}
	if r.State == store.InProgress {
		m[attrLease] = num(durMS(it.lease))
	}
	if len(r.Value) > 0 {
		m[attrValue] = &types.AttributeValueMemberB{Value: r.Value}
	}
	if it.notStored > 0 {
		m[attrNotStored] = num(strconv.FormatInt(it.notStored, 10))
	}
	return m
}

// decode reads an item, which must be the record of keyHash.
func decode(keyHash string, m map[string]types.AttributeValue) (item, error) {
	var it item
	bad := func(name string, err error) (item, error) {
		return item{}, fmt.Errorf("dynamodbstore: record %s: attribute %s: %w", keyHash, name, err)
	}
	getS := func(name string) (string, error) {
		switch v := m[name].(type) {
		case nil:
			return "", nil
		case *types.AttributeValueMemberS:
			return v.Value, nil
		default:
			return "", fmt.Errorf("not a string (%T)", v)
		}
	}
	getN := func(name string, need bool) (string, error) {
		switch v := m[name].(type) {
		case nil:
			if need {
				return "", fmt.Errorf("missing")
			}
			return "0", nil
		case *types.AttributeValueMemberN:
			return v.Value, nil
		default:
			return "", fmt.Errorf("not a number (%T)", v)
		}
	}
	strs := []struct {
		name string
		to   *string
	}{
		{attrPK, &it.rec.KeyHash}, {attrScope, &it.rec.Scope}, {attrKey, &it.rec.Key},
		{attrFP, &it.rec.Fingerprint}, {attrBinding, &it.rec.Binding},
		{attrRequestID, &it.rec.RequestID}, {attrWrite, &it.write},
	}
	for _, s := range strs {
		v, err := getS(s.name)
		if err != nil {
			return bad(s.name, err)
		}
		*s.to = v
	}
	if it.rec.KeyHash != keyHash {
		return item{}, fmt.Errorf("dynamodbstore: record %s holds key hash %q", keyHash, it.rec.KeyHash)
	}
	state, err := getS(attrState)
	if err != nil {
		return bad(attrState, err)
	}
	if it.rec.State = store.State(state); !it.rec.State.Valid() {
		return bad(attrState, fmt.Errorf("invalid state %q", state))
	}
	nums := []struct {
		name string
		need bool
		set  func(string) error
	}{
		{attrToken, true, func(s string) (err error) { it.rec.Token, err = strconv.ParseUint(s, 10, 64); return }},
		{attrVersion, true, func(s string) (err error) { it.version, err = strconv.ParseUint(s, 10, 64); return }},
		{attrLease, it.rec.State == store.InProgress, durInto(&it.lease)},
		{attrTTL, true, durInto(&it.ttl)},
		{attrCreated, true, timeInto(&it.created)},
		{attrUpdated, true, timeInto(&it.updated)},
		{attrFrom, true, timeInto(&it.from)},
		{attrUntil, true, timeInto(&it.until)},
		{attrNotStored, false, func(s string) (err error) { it.notStored, err = strconv.ParseInt(s, 10, 64); return }},
	}
	for _, n := range nums {
		v, err := getN(n.name, n.need)
		if err == nil {
			err = n.set(v)
		}
		if err != nil {
			return bad(n.name, err)
		}
	}
	switch v := m[attrValue].(type) {
	case nil:
	case *types.AttributeValueMemberB:
		it.rec.Value = v.Value
	default:
		return bad(attrValue, fmt.Errorf("not binary (%T)", v))
	}
	return it, nil
}

func durInto(d *time.Duration) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseInt(s, 10, 64)
		*d = time.Duration(v) * time.Millisecond
		return err
	}
}

func timeInto(t *time.Time) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseInt(s, 10, 64)
		*t = time.UnixMilli(v).UTC()
		return err
	}
}

// newWriteID returns a random ID for one write, by which the writer knows
// its own item when the SDK retried a request whose answer was lost.
func newWriteID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// itemSize is the size DynamoDB counts for an item: every attribute's name
// and value, numbers at their largest (21 bytes).
func itemSize(m map[string]types.AttributeValue) int {
	n := 0
	for name, v := range m {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			n += 21
		default:
			n += 64
		}
	}
	return n
}

// The value of an idemhttp response whose body was not stored, which the
// middleware (and the gateway) answers with 409 response_not_stored:
//
//	version(1) flags(1) status(2) nheaders(2) {name value}* body
//
// with every header string prefixed by its uvarint length, and the flag
// 1 for "not stored" (idemhttp/response.go). TestNotStoredMarker checks
// the marker with idemhttp itself.
const (
	responseVersion = 1
	flagNotStored   = 1
	// maxMarkerHeaders bounds the replayed headers in a marker: past it only
	// the status is.
	maxMarkerHeaders = 16 << 10
)

// notStoredValue returns what a record keeps instead of v when v does not
// fit an item. A stored idemhttp response becomes the same response
// marked not stored, its headers stored and its body dropped, so that a
// replay answers 409 response_not_stored. Anything else (a library
// caller's own bytes, a response sealed by package seal) becomes empty:
// the store cannot mark what it cannot read, and an empty value is not a
// stored response either, which the middleware also answers with 409
// response_not_stored.
func notStoredValue(v []byte) []byte {
	end, ok := responseHeaders(v)
	if !ok {
		return nil
	}
	if end > maxMarkerHeaders {
		return []byte{responseVersion, v[1] | flagNotStored, v[2], v[3], 0, 0}
	}
	m := make([]byte, end)
	copy(m, v[:end])
	m[1] |= flagNotStored
	return m
}

// responseHeaders reports whether v reads as an idemhttp response, and
// where its headers end.
func responseHeaders(v []byte) (end int, ok bool) {
	if len(v) < 6 || v[0] != responseVersion {
		return 0, false
	}
	if status := binary.BigEndian.Uint16(v[2:]); status < 100 || status > 999 {
		return 0, false
	}
	count := int(binary.BigEndian.Uint16(v[4:]))
	off := 6
	for range 2 * count {
		n, w := binary.Uvarint(v[off:])
		if w <= 0 || n > uint64(len(v)-off-w) {
			return 0, false
		}
		off += w + int(n)
	}
	return off, true
}
