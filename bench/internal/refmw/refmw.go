// Package refmw is the same-stack reference for idem's middleware: the
// least a net/http idempotency middleware does, written plainly, against
// which idemhttp's CPU and allocations per call are measured.
//
// For a request with a key it reads the body, takes its SHA-256 as the
// fingerprint, and reserves the key atomically (sync.Map.LoadOrStore). The
// first request runs the handler into a buffer and keeps status, headers
// and body; a retry with the same fingerprint gets them back; a retry with
// another body is refused (422), one that arrives while the first runs is
// refused too (409). Records live in memory for the process's life: no
// expiry, no lease, no tenants, no store interface, no durability. What
// idem does beyond this is what it costs above the reference.
package refmw

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// KeyHeader is the header the key is read from.
const KeyHeader = "Idempotency-Key"

// ReplayedHeader marks a replayed answer.
const ReplayedHeader = "Idempotent-Replayed"

// record is one key's reservation and, once its handler returned, the
// answer.
type record struct {
	fingerprint [sha256.Size]byte
	answer      atomic.Pointer[answer]
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

// Middleware holds the records of one process; its zero value is ready.
type Middleware struct {
	records sync.Map // key -> *record
}

// Wrap returns next behind the middleware.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(KeyHeader)
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		rec := &record{fingerprint: sha256.Sum256(body)}
		if got, loaded := m.records.LoadOrStore(key, rec); loaded {
			m.retry(w, got.(*record), rec.fingerprint)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		buf := &buffer{header: http.Header{}, status: http.StatusOK}
		func() {
			// A handler that panics leaves the key free for a retry.
			defer func() {
				if rec.answer.Load() == nil {
					m.records.Delete(key)
				}
			}()
			next.ServeHTTP(buf, r)
			rec.answer.Store(&answer{status: buf.status, header: buf.header, body: buf.body.Bytes()})
		}()
		write(w, rec.answer.Load(), false)
	})
}

// retry answers a request whose key was reserved before.
func (m *Middleware) retry(w http.ResponseWriter, rec *record, fp [sha256.Size]byte) {
	switch a := rec.answer.Load(); {
	case fp != rec.fingerprint:
		http.Error(w, "key reused with another request", http.StatusUnprocessableEntity)
	case a == nil:
		http.Error(w, "a request with this key is in progress", http.StatusConflict)
	default:
		write(w, a, true)
	}
}

func write(w http.ResponseWriter, a *answer, replayed bool) {
	h := w.Header()
	for k, v := range a.header {
		h[k] = v
	}
	if replayed {
		h.Set(ReplayedHeader, "true")
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// buffer is the handler's ResponseWriter: it keeps the answer for the
// record and for the client.
type buffer struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (b *buffer) Header() http.Header { return b.header }

func (b *buffer) WriteHeader(code int) {
	if !b.wroteHeader {
		b.status, b.wroteHeader = code, true
	}
}

func (b *buffer) Write(p []byte) (int, error) {
	b.wroteHeader = true
	return b.body.Write(p)
}
