package postgres

import (
	"encoding/base64"
	"encoding/binary"
	"strings"
	"time"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/wire"
)

// A notification's payload is the key hash, alone (Notify) or followed by
// a space and the record the call ended with (CarryRecord, given sealed
// records only), so that a waiter in another process replays it without
// reading the table:
//
//	payload  keyhash [" " base64(record)]
//	record   version byte | scope | key | fingerprint | binding | state |
//	         request_id | token uvarint | created_at | updated_at |
//	         expires_at | lease_until | value
//	string   uvarint length | bytes
//	time     varint microseconds since 1970, what timestamptz keeps
//	value    uvarint 0 for NULL, else 1 + length | bytes
//
// PostgreSQL's payload is text: base64 keeps NUL bytes and invalid UTF-8
// out of it. A listener of an older version takes the whole payload for a
// key hash that nobody waits for, so its waiters poll (at the poll cap)
// until every gateway runs a version that reads records.
const payloadV1 = byte(1)

// DefaultNotifyRecordMax is Options.NotifyRecordMax's default: PostgreSQL
// refuses payloads of 8000 bytes or more (with its default block size).
const DefaultNotifyRecordMax = 7999

// appendPayload appends rec's payload to b. It returns false, and b as it
// was, when the payload would be longer than limit.
func appendPayload(b []byte, rec *store.Record, limit int) ([]byte, bool) {
	var raw []byte
	raw = append(raw, payloadV1)
	for _, s := range []string{rec.Scope, rec.Key, rec.Fingerprint, rec.Binding, string(rec.State), rec.RequestID} {
		raw = binary.AppendUvarint(raw, uint64(len(s)))
		raw = append(raw, s...)
	}
	raw = binary.AppendUvarint(raw, rec.Token)
	for _, t := range []time.Time{rec.CreatedAt, rec.UpdatedAt, rec.ExpiresAt, rec.LeaseUntil} {
		raw = binary.AppendVarint(raw, t.UnixMicro())
	}
	if rec.Value == nil {
		raw = binary.AppendUvarint(raw, 0)
	} else {
		raw = binary.AppendUvarint(raw, 1+uint64(len(rec.Value)))
		raw = append(raw, rec.Value...)
	}
	if len(rec.KeyHash)+1+base64.RawStdEncoding.EncodedLen(len(raw)) > limit {
		return b, false
	}
	b = append(b, rec.KeyHash...)
	b = append(b, ' ')
	return base64.RawStdEncoding.AppendEncode(b, raw), true
}

// splitPayload reads a notification: the key hash it wakes, and, when it
// carries a record, a function that decodes it for the waiters. A record
// that does not decode, or that did not leave in_progress, is handed over
// as nil: the waiters then read the table, as after a plain Notify.
func splitPayload(payload string) (string, func() any) {
	keyHash, enc, ok := strings.Cut(payload, " ")
	if !ok {
		return payload, nil
	}
	return keyHash, func() any {
		rec, ok := decodeRecord(keyHash, enc)
		if !ok {
			return (*store.Record)(nil)
		}
		return rec
	}
}

func decodeRecord(keyHash, enc string) (*store.Record, bool) {
	raw, err := base64.RawStdEncoding.DecodeString(enc)
	if err != nil {
		return nil, false
	}
	d := wire.Reader{B: raw}
	if d.Byte() != payloadV1 {
		return nil, false
	}
	var str [6]string
	for i := range str {
		str[i] = string(d.Bytes(d.Uvarint()))
	}
	rec := &store.Record{
		KeyHash: keyHash, Scope: str[0], Key: str[1], Fingerprint: str[2], Binding: str[3],
		State: store.State(str[4]), RequestID: str[5], Token: d.Uvarint(),
	}
	for _, t := range []*time.Time{&rec.CreatedAt, &rec.UpdatedAt, &rec.ExpiresAt, &rec.LeaseUntil} {
		*t = time.UnixMicro(d.Varint()).UTC()
	}
	// The record as it was when its call ended, which the notification
	// follows at once: its times are all on the sender's clock, and read
	// against its completion.
	rec.ReadAt = rec.UpdatedAt
	if n := d.Uvarint(); n > 0 {
		rec.Value = append([]byte{}, d.Bytes(n-1)...)
	}
	if d.Err != nil || len(d.B) != 0 || !rec.State.Valid() || rec.State == store.InProgress {
		return nil, false
	}
	return rec, true
}
