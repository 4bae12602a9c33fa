package idemconnect

import (
	"errors"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idem-dev/idem/rpc/internal/core"
)

// statusOf is err as a google.rpc.Status, the form outcomes are stored in
// (so that a gRPC client and a Connect client read one outcome alike).
func statusOf(err error) *spb.Status {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return &spb.Status{Code: int32(connect.CodeOf(err)), Message: err.Error()}
	}
	st := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return st
}

// errorOf is a stored status as Connect's error.
func errorOf(st *spb.Status) *connect.Error {
	ce := connect.NewError(connect.Code(st.GetCode()), errors.New(st.GetMessage()))
	if st.GetMessage() == "" {
		ce = connect.NewError(connect.Code(st.GetCode()), nil)
	}
	for _, a := range st.GetDetails() {
		if d, err := connect.NewErrorDetail(a); err == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}

// problem is idem's answer p as Connect's error, its expiry in the
// error's metadata.
func problem(p *core.Problem) *connect.Error {
	ce := errorOf(p.Status())
	for k, v := range p.Header() {
		if k == core.PushbackKey {
			continue // grpc-go's, which reads it from trailers only
		}
		ce.Meta().Set(k, v)
	}
	return ce
}

// details are err's details that this program can decode.
func details(err error) []proto.Message {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	var out []proto.Message
	for _, d := range ce.Details() {
		if m, err := d.Value(); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// ProblemKind returns the kind of idem's answer err is
// (docs/problems.md: "in_progress", "payload_mismatch", "key_reused",
// "previous_failure", "outcome_unknown", "store_unavailable", ...), read
// from its google.rpc.ErrorInfo detail, or "" when err is not one of
// idem's.
func ProblemKind(err error) string {
	_, kind, _ := core.Classify(core.Code(connect.CodeOf(err)), details(err))
	return kind
}
