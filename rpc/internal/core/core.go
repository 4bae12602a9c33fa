package core

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/idemwire"
	"github.com/idem-dev/idem/internal/httpfield"
)

// Code is a status code; gRPC's and Connect's have the same numbers.
type Code uint32

// The codes idem answers with (google.golang.org/grpc/codes).
const (
	OK                 Code = 0
	Canceled           Code = 1
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	FailedPrecondition Code = 9
	Aborted            Code = 10
	Unimplemented      Code = 12
	ResourceExhausted  Code = 8
	Unavailable        Code = 14
	Unauthenticated    Code = 16
)

// Domain is the ErrorInfo domain of idem's own answers: a client tells
// them from the API's own errors with the same code by it.
const Domain = "idem.dev"

// Metadata names. ReplayedKey and ExpiresKey are the HTTP headers in lower
// case, as gRPC metadata keys are.
var (
	KeyName     = idemwire.MetadataKey
	ReplayedKey = strings.ToLower(idemwire.ReplayedHeader)
	ExpiresKey  = strings.ToLower(idemwire.ExpiresHeader)
	// PushbackKey is the trailer grpc-go's retry policy reads to wait
	// before its next attempt (gRFC A6), set on in_progress so that a
	// service config retrying ABORTED waits as long as the server says.
	PushbackKey = "grpc-retry-pushback-ms"
)

// Problem is one of idem's own answers (docs/problems.md's kinds), as a
// status: Code, Message, and the details ErrorInfo (reason: the kind in
// capitals; metadata: conflict_type, idempotency_key, key_expires_at) and,
// when a retry may succeed, RetryInfo.
type Problem struct {
	Code       Code
	Kind       string
	Message    string
	Key        string
	RetryAfter time.Duration
	KeyExpires time.Time
}

// Status returns p as a google.rpc.Status.
func (p *Problem) Status() *spb.Status {
	md := map[string]string{"conflict_type": p.Kind}
	if p.Key != "" {
		md["idempotency_key"] = p.Key
	}
	if !p.KeyExpires.IsZero() {
		md["key_expires_at"] = p.KeyExpires.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	details := []proto.Message{&errdetails.ErrorInfo{Reason: strings.ToUpper(p.Kind), Domain: Domain, Metadata: md}}
	if p.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(p.RetryAfter)})
	}
	st := &spb.Status{Code: int32(p.Code), Message: p.Message}
	for _, d := range details {
		a, err := anypb.New(d)
		if err != nil {
			panic(err) // both are registered types
		}
		st.Details = append(st.Details, a)
	}
	return st
}

// Header is what p's answer carries in its response metadata besides the
// status: the key's expiry, and for in_progress the pushback grpc-go's
// retry policy reads (it is a trailer there; Connect's unary protocol has
// only headers).
func (p *Problem) Header() map[string]string {
	h := map[string]string{}
	if !p.KeyExpires.IsZero() {
		h[ExpiresKey] = HTTPDate(p.KeyExpires)
	}
	if p.RetryAfter > 0 {
		h[PushbackKey] = strconv.FormatInt(p.RetryAfter.Milliseconds(), 10)
	}
	return h
}

// HTTPDate formats t as Idempotency-Key-Expires does (an HTTP-date, the
// fraction of a second dropped so that it never says later than the
// record expires).
func HTTPDate(t time.Time) string { return t.UTC().Truncate(time.Second).Format(http.TimeFormat) }

// Conflict maps the engine's conflict to its answer:
//
//	in_progress                      Aborted, RetryInfo (the first call still runs: retry later with the key)
//	payload_mismatch, key_reused,
//	previous_failure, outcome_unknown FailedPrecondition (final: the key is bound to an earlier call)
//
// FailedPrecondition says "do not retry until the state is fixed", which a
// key bound to another call is: a new call needs a new key, and the old
// call may have run. AlreadyExists is left to the API's own entities, so
// that an application's "already exists" is not mistaken for idem's.
func Conflict(ce *idem.ConflictError, key string) *Problem {
	p := &Problem{Code: FailedPrecondition, Key: key, KeyExpires: ce.Record.ExpiresAt}
	switch ce.Type {
	case idem.ConflictInProgress:
		p.Code, p.Kind, p.Message = Aborted, "in_progress", "a call with this idempotency key is still being processed; retry later with the same key"
		p.RetryAfter = ce.RetryAfter()
	case idem.ConflictPayloadMismatch:
		p.Kind, p.Message = "payload_mismatch", "this idempotency key was used with a different request message"
	case idem.ConflictKeyReused:
		p.Kind, p.Message = "key_reused", "this idempotency key was used for "+ce.Record.Binding
	case idem.ConflictPreviousFailure:
		p.Kind, p.Message = "previous_failure", "the first call with this idempotency key failed; use a new key to try again"
	case idem.ConflictOutcomeUnknown:
		p.Kind, p.Message = "outcome_unknown", "the first call with this idempotency key (request ID "+ce.Record.RequestID+
			") stopped without an outcome: it may have run. This key answers so until it expires or an operator releases it"
	default:
		p.Code, p.Kind, p.Message = Unavailable, "store_unavailable", "the key is in an unknown state: "+string(ce.Type)
	}
	return p
}

// Options are what both interceptors take.
type Options struct {
	// Tenant identifies the caller from the request's metadata as an
	// http.Header and its TLS state (nil without TLS). nil means
	// idemhttp.CredentialTenant.
	Tenant func(h http.Header, cs *tls.ConnectionState) (string, bool)
	// RequireKey answers InvalidArgument missing_key to a unary call
	// without a key; otherwise such calls pass through unprotected.
	RequireKey bool
}

// Prepare turns a call into the engine's: its key (from values, the
// metadata's idempotency-key entries), its scope (the caller's tenant), its
// fingerprint (the procedure and the request's deterministic encoding) and
// its binding (the procedure). ok is false, with no problem, for a call
// without a key that may pass through.
func Prepare(eng *idem.Engine, o *Options, procedure string, values []string, h http.Header, cs *tls.ConnectionState, req any) (c idem.Call, ok bool, p *Problem) {
	raw, present, err := httpfield.ParseKey(values)
	switch {
	case errors.Is(err, httpfield.ErrMultipleKeys):
		return c, false, &Problem{Code: InvalidArgument, Kind: "multiple_keys", Message: "send exactly one idempotency-key"}
	case err != nil:
		return c, false, &Problem{Code: InvalidArgument, Kind: "invalid_key", Message: "the idempotency-key is not a valid Structured Field string"}
	case !present && o.RequireKey:
		return c, false, &Problem{Code: InvalidArgument, Kind: "missing_key", Message: "this method requires an idempotency-key"}
	case !present:
		return c, false, nil
	}
	key, err := idem.ValidateKey(raw, eng.Policy().MaxKeyBytes)
	if err != nil {
		msg := "invalid idempotency-key"
		var ke *idem.KeyError
		if errors.As(err, &ke) {
			msg = "the idempotency-key " + ke.Reason
		}
		return c, false, &Problem{Code: InvalidArgument, Kind: "invalid_key", Message: msg}
	}
	tenantOf := o.Tenant
	if tenantOf == nil {
		// The HTTP middleware's own rule, so that a caller has one key
		// space over HTTP, gRPC and Connect alike.
		tenantOf = idemhttp.CredentialTenant
	}
	tenant, known := tenantOf(h, cs)
	if !known {
		return c, false, &Problem{Code: Unauthenticated, Kind: "tenant_required", Key: key,
			Message: "a call with an idempotency-key must carry credentials: keys are scoped by caller"}
	}
	msg, isProto := req.(proto.Message)
	if !isProto {
		// A server whose codec is not protobuf: refused rather than run
		// unprotected, since the caller counts on its key.
		return c, false, &Problem{Code: Unimplemented, Kind: "unsupported_message", Key: key,
			Message: fmt.Sprintf("idem fingerprints protobuf messages only, not %T", req)}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return c, false, &Problem{Code: InvalidArgument, Kind: "invalid_key", Key: key, Message: "the request message cannot be encoded: " + err.Error()}
	}
	return idem.Call{
		Scope:       idemhttp.ScopeTenant.Format(tenant, "", ""),
		Key:         key,
		Fingerprint: idem.HashParts([]byte(procedure), b),
		Binding:     procedure,
		RequestID:   httpfield.NewRequestID(),
	}, true, nil
}

// Outcome is a call's recorded outcome: the response message, or the
// status it ended with, details included.
type Outcome struct {
	Message proto.Message // nil for an error
	Status  *spb.Status   // nil for OK
}

type stored struct {
	V       int    `json:"idem_rpc"`
	Type    string `json:"type,omitempty"`
	Message []byte `json:"message,omitempty"`
	Status  []byte `json:"status,omitempty"`
}

// Encode returns o as stored.
func Encode(o Outcome) ([]byte, error) {
	s := stored{V: 1}
	if o.Status != nil {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(o.Status)
		if err != nil {
			return nil, err
		}
		s.Status = b
	} else {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(o.Message)
		if err != nil {
			return nil, err
		}
		s.Type, s.Message = string(proto.MessageName(o.Message)), b
	}
	return json.Marshal(s)
}

// ErrNotAnOutcome is returned by Decode for a value that is not a stored
// outcome, or whose message type this program does not know.
var ErrNotAnOutcome = errors.New("idem/rpc: the stored value is not a call's outcome")

// Decode reads a stored outcome. The message is of its recorded type,
// found in the global registry (generated code registers every type).
func Decode(v []byte) (Outcome, error) {
	var s stored
	if err := json.Unmarshal(v, &s); err != nil || s.V != 1 {
		return Outcome{}, ErrNotAnOutcome
	}
	if s.Status != nil {
		st := &spb.Status{}
		if err := proto.Unmarshal(s.Status, st); err != nil {
			return Outcome{}, errors.Join(ErrNotAnOutcome, err)
		}
		return Outcome{Status: st}, nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(s.Type))
	if err != nil {
		return Outcome{}, errors.Join(ErrNotAnOutcome, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(s.Message, m); err != nil {
		return Outcome{}, errors.Join(ErrNotAnOutcome, err)
	}
	return Outcome{Message: m}, nil
}

// NotExecuted reports whether a handler's status says nothing ran, so the
// key is released and a retry runs: Unavailable and ResourceExhausted, the
// codes gRPC documents as safe to retry.
func NotExecuted(c Code) bool { return c == Unavailable || c == ResourceExhausted }

// Answer is what a call gets: the handler ran for it (Ran, and its own
// response or error go back as they are), the recorded outcome (Replay),
// or one of idem's problems.
type Answer struct {
	Ran        bool
	Replay     *Outcome
	Problem    *Problem
	KeyExpires time.Time // the record's expiry, zero when none is set
	Err        error     // the context's error: the caller went away
}

// Run runs fn once per key through the engine and says what the call
// gets. fn returns the handler's outcome; run reports whether the
// handler's own return values are this call's answer.
func Run(ctx context.Context, eng *idem.Engine, c idem.Call, fn func(ctx context.Context) Outcome) Answer {
	ran := false
	res, err := eng.Do(ctx, c, func(ctx context.Context) ([]byte, error) {
		ran = true
		o := fn(ctx)
		v, err := Encode(o)
		if err != nil {
			// Nothing to record: the handler's answer still goes back,
			// and a retry runs again.
			return nil, fmt.Errorf("idem/rpc: %w: %w", idem.ErrNotExecuted, err)
		}
		if o.Status == nil {
			return v, nil
		}
		ferr := &idem.Failure{Value: v, Err: fmt.Errorf("status %d: %s", o.Status.Code, o.Status.Message)}
		if NotExecuted(Code(o.Status.Code)) {
			return v, fmt.Errorf("%w: %w", idem.ErrNotExecuted, ferr)
		}
		return v, ferr
	})
	var ce *idem.ConflictError
	switch {
	case ran && res.NotRecorded:
		return Answer{Problem: &Problem{Code: Unavailable, Kind: "outcome_not_recorded", Key: c.Key, RetryAfter: time.Second,
			Message: "the call may have run, but its outcome could not be recorded; retry with the same idempotency-key to learn what retries get"}}
	case ran:
		return Answer{Ran: true, KeyExpires: res.ExpiresAt}
	case err == nil || errors.As(err, &ce) && ce.Type == idem.ConflictPreviousFailure && eng.Policy().OnFailure == idem.OnFailureCache:
		v, exp := res.Value, res.ExpiresAt
		if err != nil {
			v, exp = ce.Record.Value, ce.Record.ExpiresAt
		}
		o, derr := Decode(v)
		if derr != nil {
			return Answer{Problem: &Problem{Code: FailedPrecondition, Kind: "response_not_stored", Key: c.Key, KeyExpires: exp,
				Message: "the first call's outcome cannot be read here (" + derr.Error() + "); it is not run again"}}
		}
		return Answer{Replay: &o, KeyExpires: exp}
	case ce != nil:
		return Answer{Problem: Conflict(ce, c.Key)}
	case errors.Is(err, idem.ErrInvalidKey):
		return Answer{Problem: &Problem{Code: InvalidArgument, Kind: "invalid_key", Message: err.Error()}}
	case ctx.Err() != nil:
		return Answer{Err: context.Cause(ctx)}
	default:
		return Answer{Problem: &Problem{Code: Unavailable, Kind: "store_unavailable", Key: c.Key, RetryAfter: time.Second,
			Message: "the idempotency store cannot be reached; nothing was executed"}}
	}
}

// Verdict is what a client does with a call's error, by the rule both
// clients share (docs/problems.md, "How a client retries"), read for RPC:
// idem's named answers first (ErrorInfo of Domain), then the code.
type Verdict int

const (
	Final Verdict = iota // the outcome: return it
	Retry                // nothing ran, or no outcome yet: call again with the key
	Wait                 // in_progress: call again with the key after the delay
)

// Classify says what a client does with an error of code whose details
// are details, and how long the server asked it to wait (RetryInfo; 0
// when it did not say). kind is idem's problem kind, "" for the API's own
// errors.
func Classify(code Code, details []proto.Message) (v Verdict, kind string, wait time.Duration) {
	for _, d := range details {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == Domain {
				kind = d.GetMetadata()["conflict_type"]
			}
		case *errdetails.RetryInfo:
			wait = d.GetRetryDelay().AsDuration()
		}
	}
	switch kind {
	case "in_progress":
		return Wait, kind, wait
	case "payload_mismatch", "key_reused", "previous_failure", "response_not_stored", "outcome_unknown":
		return Final, kind, 0
	case "store_unavailable", "outcome_not_recorded":
		return Retry, kind, wait
	}
	if code == Unavailable || code == ResourceExhausted {
		return Retry, kind, wait
	}
	return Final, kind, 0
}

// Attempts calls send until it gives an outcome (Final), at most maxAttempts
// times (0 means 4), waiting between attempts as the server asked, else
// backoff(n) (nil means Backoff); it stops early when ctx ends. send keeps
// its own last answer.
func Attempts(ctx context.Context, maxAttempts int, backoff func(n int) time.Duration, send func() (Verdict, time.Duration)) {
	if maxAttempts <= 0 {
		maxAttempts = 4
	}
	if backoff == nil {
		backoff = Backoff
	}
	for attempt := 1; ; attempt++ {
		v, wait := send()
		if v == Final || attempt >= maxAttempts {
			return
		}
		if wait <= 0 {
			wait = backoff(attempt)
		}
		if Sleep(ctx, wait) != nil {
			return
		}
	}
}

// Backoff is the wait before attempt n+1 when the server named none: 100
// ms doubling up to 5 s, with jitter, as idemclient's.
func Backoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n-1, 6)
	d = min(d, 5*time.Second)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Sleep waits d or until ctx ends, and returns ctx's error then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
