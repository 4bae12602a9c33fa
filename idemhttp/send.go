package idemhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"

	"github.com/idem-dev/idem"
)

// Sending a response to the client: the first one, held by the capture
// until its outcome was recorded (commit), or the key's stored outcome
// (replay).

// commit sends the held first response.
func (x *exchange) commit(cap *capture) {
	prof := x.rt.profile
	h := x.w.Header()
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
	x.w.WriteHeader(cap.status)
	_, _ = x.w.Write(body)
}

// replay sends the key's stored outcome, straight from the stored bytes:
// its headers decoded into the client's map (see decodeInto), its body
// written as stored. A value that is not a stored response is answered
// 409 response_not_stored. ctx is the request's, or the background when
// the outcome is not this request's own lookup (one recorded by another
// replica, read after a lost lease).
func (x *exchange) replay(ctx context.Context, res idem.Result) {
	key, log := x.call.Key, x.m.log
	h := x.w.Header()
	if _, notStored, _, err := decodeInto(res.Value, nil, nil, nil); err != nil || notStored {
		detail := "the first response was too large or streamed, so it was not stored; it is not executed again"
		if err != nil {
			log.Error("idem: stored response unreadable", x.m.logAttrs(slog.LevelError, x.call, "err", err)...)
			detail = "the stored response cannot be read"
		}
		x.reject(&Problem{Kind: KindResponseNotStored, Key: key, Detail: detail, KeyExpires: res.ExpiresAt})
		return
	}
	prof := x.rt.profile
	var extra headerValues
	// Only the headers replayed today, by canonical name, and no framing one:
	// the record may have been written by anyone with access to the store.
	status, _, body, _ := decodeInto(res.Value, h, &extra, x.m.replayHeader)
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
	x.w.WriteHeader(status)
	_, _ = x.w.Write(body)
	if log.Enabled(ctx, slog.LevelDebug) {
		log.DebugContext(ctx, "idem: replayed stored response", x.m.logAttrs(slog.LevelDebug, x.call, "status", status)...)
	}
	x.ev.Outcome, x.ev.Status = OutcomeReplayed, status
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
