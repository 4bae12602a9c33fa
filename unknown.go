package idem

import (
	"bytes"

	"github.com/idem-dev/idem/store"
)

// unknownMarker starts the Value of a failed record whose outcome is
// unknown (ErrOutcomeUnknown, or a panic in the operation); the failure
// itself follows it. This package owns it: the engine writes it (finish,
// through markUnknown) and reads it (outcomeUnknown, for Record.OutcomeUnknown); no other package
// looks at the bytes.
//
// The engine keeps "unknown" in the record's value rather than in a field
// of its own on purpose: stores keep Value opaque, so every store (memory,
// file, PostgreSQL, Redis, S3, and wrappers such as seal's that encrypt the
// value) keeps the mark with no schema change, no migration, and no store
// that forgets it; a record written before this mark existed reads as a
// plain failure, as it was. The marker starts with a NUL byte, which
// neither an error message nor idemhttp's stored response (it starts with
// its version byte) begins with, so it cannot be taken for a failure's own
// bytes.
var unknownMarker = []byte("\x00idem:outcome_unknown\x00")

// markUnknown returns the value stored for a failure whose outcome is
// unknown.
func markUnknown(failure []byte) []byte {
	v := make([]byte, 0, len(unknownMarker)+len(failure))
	return append(append(v, unknownMarker...), failure...)
}

// outcomeUnknown reports whether r is a failed record whose outcome is
// unknown (the operation started and it is not known whether it took
// effect), and returns the failure recorded for it. It is the only reader
// of the marker: callers see the answer as Record.OutcomeUnknown.
func outcomeUnknown(r store.Record) (failure []byte, ok bool) {
	if r.State != store.Failed || !bytes.HasPrefix(r.Value, unknownMarker) {
		return nil, false
	}
	return r.Value[len(unknownMarker):], true
}
