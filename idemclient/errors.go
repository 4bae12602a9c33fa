package idemclient

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Errors the transport returns, matchable with errors.Is. Each comes wrapped
// in an *Error that carries the key.
var (
	// ErrInProgress: the first request with this key was still running when
	// the transport stopped retrying. The operation may complete; send the
	// request again later with the same key (Error.Key) to get its outcome.
	ErrInProgress = errors.New("idemclient: a request with this key is still in progress")
	// ErrConflict: the server refused the key because it was used before
	// for a different request (payload_mismatch, key_reused), or because its
	// first use failed, was not stored or has an unknown outcome
	// (previous_failure, response_not_stored, outcome_unknown). The operation behind the key ran (or was
	// tried): sending the request again with a new key may run it twice.
	ErrConflict = errors.New("idemclient: the idempotency key conflicts with an earlier request")
	// ErrGaveUp: no final answer after the last attempt (network errors,
	// 408, 429, 5xx but 501 and 505: docs/problems.md, "How a client
	// retries"). The request may have run; it stays in the outbox.
	ErrGaveUp = errors.New("idemclient: no final answer")
	// ErrOffline: SendPending did not send the request because the server
	// could not be reached; it stays in the outbox.
	ErrOffline = errors.New("idemclient: server unreachable")
	// ErrExpired: SendPending dropped a request older than MaxAge unsent.
	ErrExpired = errors.New("idemclient: pending request expired")
	// ErrKeyExpired: the server forgets the request's key before another
	// attempt could reach it (Error.KeyExpires, as the server told it), so
	// the transport stopped: sent again, the request would run as new,
	// a second time if the first ran. It matches ErrExpired too; the
	// request leaves the outbox.
	ErrKeyExpired = fmt.Errorf("%w: the server no longer keeps its idempotency key", ErrExpired)
)

// Error is the transport's answer when a request has no final response. It
// carries what a caller needs to try again without running the operation
// twice: the key, and whether the operation may have run.
type Error struct {
	// Key is the idempotency key the request was sent with; send the same
	// request again with it (Idempotency-Key header) to get its outcome.
	Key    string
	Method string
	URL    string
	// Attempts is the number of attempts made.
	Attempts int
	// MayHaveRun is false only when no attempt can have reached the server
	// (every one failed to connect). When it is true, a new key may run the
	// operation a second time.
	MayHaveRun bool
	// Kind is the problem the server named (in_progress, payload_mismatch,
	// key_reused, previous_failure, response_not_stored, ...), or "".
	Kind string
	// KeyExpires is when the server forgets the key, on this client's
	// clock (see KeyExpires), as the last answer that told it said; zero
	// when none did.
	KeyExpires time.Time
	// Status, Header and Body are the last answer's, when there was one
	// (Body up to 64 KiB).
	Status int
	Header http.Header
	Body   []byte
	// Err is one of the sentinel errors above, joined with the cause.
	Err error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s (key %s) after %d attempt(s)", e.Method, e.URL, e.Key, e.Attempts)
	if e.Status != 0 {
		s += fmt.Sprintf(": status %d", e.Status)
	}
	if e.Kind != "" {
		s += " " + e.Kind
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }
