package idemhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
)

// finish answers a request whose handler ran. Its response is sent only
// once its outcome is recorded.
func (m *middleware) finish(w http.ResponseWriter, rt *route, c idem.Call, a *attempt, ev *Event) {
	cap := a.cap
	ev.Outcome, ev.Status = OutcomeExecuted, cap.status
	if a.res.Unprotected {
		ev.Outcome = OutcomeUnprotected
	}
	switch {
	case a.panicked != nil && cap.passing:
		// Part of the response is out: only aborting the connection tells
		// the client it is not whole (a chunked body would otherwise end
		// cleanly). The outcome is recorded.
		panic(a.panicked)
	case cap.passing:
		// Already sent (a stream, or a body over the limit).
	case recordFailed(a.err):
		m.unrecorded(w, rt, c, a, ev)
	case a.panicked == http.ErrAbortHandler:
		m.reject(w, rt, &Problem{Kind: KindUpstreamUnavailable, Key: c.Key, RequestID: c.RequestID,
			Detail: "the answer broke off: the call may have run, so its outcome is unknown. " +
				"Retries with this Idempotency-Key get 409 outcome_unknown"}, ev)
	case a.panicked != nil:
		// The outcome is recorded; let http.Server report the panic.
		panic(a.panicked)
	default:
		commit(w, cap, rt.profile)
	}
}

// recordFailed reports whether err says an outcome could not be recorded.
func recordFailed(err error) bool {
	return errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrStoreUnavailable)
}

// commit sends the held first response.
func commit(w http.ResponseWriter, cap *capture, prof *Profile) {
	h := w.Header()
	for k, vs := range cap.header {
		h[k] = vs
	}
	body := cap.body.Bytes()
	if prof.BodyFlag != "" {
		if b, ok := withFlag(body, prof.BodyFlag, false); ok {
			body = b
			h.Set("Content-Length", strconv.Itoa(len(body)))
		}
	}
	w.WriteHeader(cap.status)
	_, _ = w.Write(body)
}

// unrecorded answers a request whose handler ran but whose outcome could
// not be recorded (its lease was lost to a takeover, or the store failed).
// The held response is never sent: the client gets what a retry gets.
func (m *middleware) unrecorded(w http.ResponseWriter, rt *route, c idem.Call, a *attempt, ev *Event) {
	m.log.Error("idem: outcome not recorded; answering what a retry gets", "key", c.Key, "scope", c.Scope,
		"request_id", c.RequestID, "kept", a.res.Kept, "err", a.err)
	notRecorded := &Problem{Kind: KindOutcomeNotRecorded, Key: c.Key, RequestID: c.RequestID, RetryAfter: time.Second,
		Detail: "the call may have run, but its outcome could not be recorded; retry with the same Idempotency-Key"}
	if a.res.Kept {
		notRecorded.Detail = "the call ran, but the idempotency store would not take its outcome yet: " +
			"this server keeps it, records it as soon as the store accepts, and answers retries of this key from it. " +
			"Retry with the same Idempotency-Key: the call is not run again while this server runs"
	}
	if !errors.Is(a.err, idem.ErrLeaseLost) {
		// The store failed: the key is still this call's, and a retry
		// gets its outcome once recorded (or kept), never a second run.
		m.reject(w, rt, notRecorded, ev)
		return
	}
	// Another call has the key now: answer what a retry gets, decided as
	// Do decides it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(context.Background()), 5*time.Second)
	defer cancel()
	res, err := rt.eng.Peek(ctx, c)
	var ce *idem.ConflictError
	switch {
	case err == nil:
		m.replay(w, nil, rt, c.Key, res, ev)
	case errors.As(err, &ce):
		m.conflict(w, rt, c.Key, res, ce, ev)
	default:
		// Released since, or the store does not answer.
		m.reject(w, rt, notRecorded, ev)
	}
}

// answer answers a request whose handler did not run for it: a replay, a
// conflict, or the store's failure.
func (m *middleware) answer(w http.ResponseWriter, r *http.Request, rt *route, c idem.Call, res idem.Result, err error, ev *Event) {
	if err == nil {
		m.replay(w, r, rt, c.Key, res, ev)
		return
	}
	var ce *idem.ConflictError
	switch {
	case errors.As(err, &ce):
		m.log.Info("idem: conflict", "key", c.Key, "scope", c.Scope, "conflict_type", ce.Type)
		m.conflict(w, rt, c.Key, res, ce, ev)
	case errors.Is(err, store.ErrNoSpace):
		// 503 rather than WebDAV's 507: clients and their retry policies
		// know to come back after a 503 with Retry-After.
		m.log.Error("idem: store full", "key", c.Key, "err", err)
		m.reject(w, rt, &Problem{Kind: KindStoreUnavailable, Key: c.Key, RetryAfter: 5 * time.Second,
			Detail: "the idempotency store has no space left to record new calls; nothing was executed. " +
				"Outcomes already recorded are still replayed; retry later"}, ev)
	case errors.Is(err, idem.ErrStoreUnavailable):
		m.log.Error("idem: store unavailable", "key", c.Key, "err", err)
		m.reject(w, rt, &Problem{Kind: KindStoreUnavailable, Key: c.Key, RetryAfter: time.Second,
			Detail: "the idempotency store cannot be reached; nothing was executed"}, ev)
	case r.Context().Err() != nil:
		// The client went away while waiting: nobody to answer.
		ev.Outcome = OutcomePassThrough
	default:
		m.log.Error("idem: unexpected error", "key", c.Key, "err", err)
		m.reject(w, rt, &Problem{Kind: KindStoreUnavailable, Key: c.Key, RetryAfter: time.Second,
			Detail: "the request could not be checked; nothing was executed"}, ev)
	}
}

// conflict answers an existing record that keeps the call from running,
// saying until when the record is kept.
func (m *middleware) conflict(w http.ResponseWriter, rt *route, key string, res idem.Result, ce *idem.ConflictError, ev *Event) {
	p := &Problem{Key: key, KeyExpires: ce.Record.ExpiresAt}
	switch ce.Type {
	case idem.ConflictPreviousFailure:
		if rt.eng.Policy().OnFailure == idem.OnFailureCache {
			m.replay(w, nil, rt, key, res, ev)
			return
		}
		p.Kind, p.Detail = KindPreviousFailure, "the first request with this key failed; use a new key to try again"
		if stored, err := DecodeResponse(ce.Record.Value); err == nil {
			p.Previous = newPreviousFailure(stored)
		}
	case idem.ConflictInProgress:
		p.Kind, p.Detail = KindInProgress, "a request with this key is still being processed; retry later"
		p.RetryAfter = ce.RetryAfter()
	case idem.ConflictPayloadMismatch:
		p.Kind, p.Detail = KindPayloadMismatch, "this key was used with a different request body or target"
	case idem.ConflictKeyReused:
		p.Kind, p.Detail = KindKeyReused, "this key was used for "+ce.Record.Binding
	case idem.ConflictOutcomeUnknown:
		p.Kind, p.RequestID = KindOutcomeUnknown, ce.Record.RequestID
		p.Detail = "the first request with this key (request ID " + ce.Record.RequestID + ") was sent, but no complete answer came back: " +
			"it may have run. This key answers 409 until it expires or an operator releases it"
	default:
		p.Kind, p.Detail = KindStoreUnavailable, "the key is in an unknown state: "+string(ce.Type)
	}
	m.reject(w, rt, p, ev)
}

// replay sends a stored response, straight from the stored bytes: its
// headers decoded into the client's map (see decodeInto), its body written
// as stored. A value that is not a stored response leaves them untouched.
// r is nil when no request is at hand (an outcome recorded by another
// replica, looked up after a lost lease).
func (m *middleware) replay(w http.ResponseWriter, r *http.Request, rt *route, key string, res idem.Result, ev *Event) {
	h := w.Header()
	if _, notStored, _, err := decodeInto(res.Value, nil, nil); err != nil || notStored {
		detail := "the first response was too large or streamed, so it was not stored; it is not executed again"
		if err != nil {
			m.log.Error("idem: stored response unreadable", "key", key, "err", err)
			detail = "the stored response cannot be read"
		}
		m.reject(w, rt, &Problem{Kind: KindResponseNotStored, Key: key, Detail: detail, KeyExpires: res.ExpiresAt}, ev)
		return
	}
	prof := rt.profile
	var extra headerValues
	status, _, body, _ := decodeInto(res.Value, h, &extra)
	extra.grow(5) // when the response stored no header
	if prof.BodyFlag != "" {
		if b, ok := withFlag(body, prof.BodyFlag, true); ok {
			body = b
		}
	}
	if prof.ReplayedHeader != "" {
		extra.set(h, prof.ReplayedHeader, "true")
	}
	if prof.OriginalRequestIDHeader != "" && res.RequestID != "" {
		extra.set(h, prof.OriginalRequestIDHeader, res.RequestID)
	}
	if prof.CachedHeader != "" {
		extra.set(h, prof.CachedHeader, "true")
	}
	if !res.ExpiresAt.IsZero() {
		extra.set(h, ExpiresHeader, httpDate(res.ExpiresAt))
	}
	extra.set(h, "Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
	ctx := context.Background()
	if r != nil {
		ctx = r.Context()
	}
	if m.log.Enabled(ctx, slog.LevelDebug) {
		m.log.DebugContext(ctx, "idem: replayed stored response", "key", key, "status", status)
	}
	ev.Outcome, ev.Status = OutcomeReplayed, status
}

// withFlag adds "flag": v to a JSON object body, keeping the rest of its
// bytes as they are. Bodies that are not JSON objects are left alone.
func withFlag(body []byte, flag string, v bool) ([]byte, bool) {
	b := bytes.TrimSpace(body)
	if len(b) < 2 || b[0] != '{' || !json.Valid(b) {
		return nil, false
	}
	val := "false"
	if v {
		val = "true"
	}
	var out bytes.Buffer
	out.Grow(len(b) + len(flag) + 10)
	out.WriteString(`{"`)
	out.WriteString(flag)
	out.WriteString(`":`)
	out.WriteString(val)
	rest := bytes.TrimSpace(b[1:])
	if rest[0] != '}' {
		out.WriteByte(',')
	}
	out.Write(rest)
	return out.Bytes(), true
}
