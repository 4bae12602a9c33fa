package core

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idem-dev/idem"
)

// The retry rule of idem's clients, read for RPC (docs/problems.md, "How a
// client retries"): each of idem's answers as Conflict makes it, and the
// API's own codes.
func TestClassify(t *testing.T) {
	info := func(kind string) proto.Message {
		return &errdetails.ErrorInfo{Domain: Domain, Reason: kind, Metadata: map[string]string{"conflict_type": kind}}
	}
	for _, c := range []struct {
		code    Code
		details []proto.Message
		want    Verdict
		kind    string
	}{
		{Aborted, []proto.Message{info("in_progress"), &errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)}}, Wait, "in_progress"},
		{FailedPrecondition, []proto.Message{info("payload_mismatch")}, Final, "payload_mismatch"},
		{FailedPrecondition, []proto.Message{info("key_reused")}, Final, "key_reused"},
		{FailedPrecondition, []proto.Message{info("outcome_unknown")}, Final, "outcome_unknown"},
		{FailedPrecondition, []proto.Message{info("previous_failure")}, Final, "previous_failure"},
		{Unavailable, []proto.Message{info("store_unavailable")}, Retry, "store_unavailable"},
		{Unavailable, []proto.Message{info("outcome_not_recorded")}, Retry, "outcome_not_recorded"},
		{Unauthenticated, []proto.Message{info("tenant_required")}, Final, "tenant_required"},
		{Unavailable, nil, Retry, ""},
		{ResourceExhausted, nil, Retry, ""},
		{Aborted, nil, Final, ""}, // the API's own Aborted: not idem's to retry
		{Code(13), nil, Final, ""},
		{FailedPrecondition, []proto.Message{&errdetails.ErrorInfo{Domain: "example.com", Metadata: map[string]string{"conflict_type": "in_progress"}}}, Final, ""},
	} {
		v, kind, _ := Classify(c.code, c.details)
		if v != c.want || kind != c.kind {
			t.Errorf("code %d %v: verdict %d %q, want %d %q", c.code, c.details, v, kind, c.want, c.kind)
		}
	}
}

func TestConflictCodes(t *testing.T) {
	for typ, code := range map[idem.ConflictType]Code{
		idem.ConflictInProgress: Aborted, idem.ConflictPayloadMismatch: FailedPrecondition, idem.ConflictKeyReused: FailedPrecondition,
		idem.ConflictPreviousFailure: FailedPrecondition, idem.ConflictOutcomeUnknown: FailedPrecondition,
	} {
		p := Conflict(&idem.ConflictError{Type: typ}, "k")
		v, kind, _ := Classify(p.Code, unpack(t, p.Status()))
		if p.Code != code || kind != p.Kind || (v == Wait) != (typ == idem.ConflictInProgress) {
			t.Errorf("%s: code %d kind %q verdict %d", typ, p.Code, kind, v)
		}
	}
}

func unpack(t *testing.T, st *spb.Status) []proto.Message {
	var out []proto.Message
	for _, a := range st.Details {
		m, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestOutcomeRoundTrip(t *testing.T) {
	msg, _ := structpb.NewStruct(map[string]any{"a": 1.0, "b": "x"})
	for _, o := range []Outcome{
		{Message: msg},
		{Message: wrapperspb.String("hello")},
		{Status: (&Problem{Code: FailedPrecondition, Kind: "payload_mismatch", Key: "k", RetryAfter: time.Second}).Status()},
	} {
		v, err := Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got.Message, o.Message) || !proto.Equal(got.Status, o.Status) {
			t.Errorf("%v came back as %v", o, got)
		}
	}
	if _, err := Decode([]byte(`{"status":200}`)); err == nil {
		t.Error("an HTTP response's record decoded as a call's outcome")
	}
	if _, err := Decode([]byte(`{"idem_rpc":1,"type":"no.such.Type","message":""}`)); err == nil {
		t.Error("an unknown message type decoded")
	}
}
