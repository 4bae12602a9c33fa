package postgres

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem/store"
)

func payloadRecord() store.Record {
	at := time.Date(2026, 11, 26, 7, 0, 0, 123456789, time.UTC)
	return store.Record{
		KeyHash: store.HashKey("test", "k"), Scope: "test", Key: "k", Fingerprint: "fp", Binding: "b",
		State: store.Succeeded, Token: 1<<63 + 5, Value: []byte("charged\x00\xff"), RequestID: "req-1",
		CreatedAt: at, UpdatedAt: at.Add(time.Second), ExpiresAt: at.Add(time.Hour), LeaseUntil: at.Add(time.Minute),
	}
}

// TestPayloadRoundTrip: a record crosses a notification as a read of the
// table would return it (times to the microsecond, NULL and empty values
// apart), in a payload PostgreSQL accepts as text.
func TestPayloadRoundTrip(t *testing.T) {
	t.Parallel()
	for _, value := range [][]byte{[]byte("charged\x00\xff"), {}, nil} {
		rec := payloadRecord()
		rec.Value = value
		b, ok := appendPayload(nil, &rec, DefaultNotifyRecordMax)
		if !ok || strings.ContainsRune(string(b), 0) {
			t.Fatalf("payload %q, %v", b, ok)
		}
		key, val := splitPayload(string(b))
		if key != rec.KeyHash || val == nil {
			t.Fatalf("split: key %q, value func %v", key, val != nil)
		}
		got, _ := val().(*store.Record)
		want := rec
		for _, tm := range []*time.Time{&want.CreatedAt, &want.UpdatedAt, &want.ExpiresAt, &want.LeaseUntil} {
			*tm = tm.Truncate(time.Microsecond)
		}
		want.ReadAt = want.UpdatedAt // read as of its completion
		if got == nil || !reflect.DeepEqual(*got, want) {
			t.Fatalf("decoded %+v, want %+v", got, want)
		}
	}
}

// TestPayloadLimit: a payload longer than the limit is not made.
func TestPayloadLimit(t *testing.T) {
	t.Parallel()
	rec := payloadRecord()
	b, ok := appendPayload(nil, &rec, DefaultNotifyRecordMax)
	if !ok {
		t.Fatal("a small record did not fit")
	}
	if _, ok := appendPayload(nil, &rec, len(b)); !ok {
		t.Fatal("a payload of exactly the limit was refused")
	}
	if got, ok := appendPayload(nil, &rec, len(b)-1); ok || len(got) != 0 {
		t.Fatalf("a payload over the limit: %q, %v", got, ok)
	}
}

// TestPayloadDamaged: a plain key hash wakes with
// no record, and a record that does not decode, or is still in progress,
// is handed over as nil, so the waiter reads the table.
func TestPayloadDamaged(t *testing.T) {
	t.Parallel()
	kh := store.HashKey("test", "k")
	if key, val := splitPayload(kh); key != kh || val != nil {
		t.Fatalf("a plain key hash: %q, value func %v", key, val != nil)
	}
	running := payloadRecord()
	running.State = store.InProgress
	b, _ := appendPayload(nil, &running, DefaultNotifyRecordMax)
	good := payloadRecord()
	g, _ := appendPayload(nil, &good, DefaultNotifyRecordMax)
	for _, p := range []string{kh + " !!!", kh + " AQ", string(b), string(g[:len(g)-3]), string(g) + "AA"} {
		key, val := splitPayload(p)
		if key != kh || val == nil {
			t.Fatalf("%q: key %q", p, key)
		}
		if rec, _ := val().(*store.Record); rec != nil {
			t.Fatalf("%q decoded to %+v", p, rec)
		}
	}
}
