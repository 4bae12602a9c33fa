// Package anchor is the durable proxy the gateway on a durable store is
// measured against: httputil.ReverseProxy with synced appends to a Pebble
// write-ahead log, and nothing else: no index, no lookup, no replay, no
// fingerprint. A gateway's first calls against it show what idem's own
// work costs above the syncs, with the syncs done by an engine many Go
// services already trust; against the plain proxy they also show the
// syncs themselves.
//
// It runs in one of two modes (Appends):
//
//   - Two: a synced append before forwarding the request and one after
//     the upstream's answer, before it goes back to the client: the
//     least a gateway does that persists its reservation before the
//     upstream runs (idem's stores before OneSync, and under
//     on_stale: conflict).
//   - One: the request's and the answer's bytes in one synced append
//     after the answer, before it goes back to the client: the floor of
//     a first call that syncs once (the file and Pebble stores with
//     OneSync, the gateway's setting), where only the outcome must be on
//     disk before the answer. It is the floor rather than an unsynced
//     append of the request followed by a synced one of the answer (what
//     the stores do) because that second form does the same sync plus one
//     more pass through the log's commit pipeline a request: a goal set
//     against it would hide that pass's cost. It is also what store/file's
//     BenchmarkAnchor "wal1" does at the store level.
package anchor

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"

	"github.com/cockroachdb/pebble"
)

// WAL is the log the proxy appends to; *pebble.DB is one. LogData with
// pebble.Sync returns once the data is synced to disk (Pebble groups
// concurrent syncs into one fsync, as idem's file store does).
type WAL interface {
	LogData(data []byte, opts *pebble.WriteOptions) error
}

// Record kinds, the first byte of each appended record.
const (
	KindRequest  = 'Q' // Two, before forwarding: key, method and path, body
	KindResponse = 'A' // Two, after the answer: key, status, body
	KindPair     = 'P' // One, after the answer: key, method and path, body, status, body
)

// KeyHeader is the header the key is read from; a request without one
// is still logged, with an empty key.
const KeyHeader = "Idempotency-Key"

// Appends is the number of synced appends a request makes: One or Two.
type Appends int

// The modes; see the package's doc.
const (
	One Appends = 1
	Two Appends = 2
)

// Proxy forwards to an upstream, appending to its WAL with pebble.Sync.
type Proxy struct {
	wal     WAL
	appends Appends
	rp      *httputil.ReverseProxy
}

var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// pendingKey carries a request's fields, encoded, from ServeHTTP to
// logResponse in One mode, through the outgoing request's context.
type pendingKey struct{}

// New returns a proxy to upstream through transport (nil means
// http.DefaultTransport), logging to wal with appends synced appends a
// request.
func New(upstream *url.URL, transport http.RoundTripper, wal WAL, appends Appends) *Proxy {
	p := &Proxy{wal: wal, appends: appends}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = r.In.Host
		},
		Transport:      transport,
		ModifyResponse: p.logResponse,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	return p
}

// ServeHTTP logs the request (Two: synced, now; One: kept for the
// answer's append), forwards it, and logs the answer synced before it is
// written back (ModifyResponse).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key, what := r.Header.Get(KeyHeader), r.Method+" "+r.URL.Path
	if p.appends == One {
		b := bufs.Get().(*bytes.Buffer)
		defer bufs.Put(b)
		b.Reset()
		b.WriteByte(KindPair)
		fields(b, []byte(key), []byte(what), body)
		r = r.WithContext(context.WithValue(r.Context(), pendingKey{}, b))
	} else if err := p.append(KindRequest, []byte(key), []byte(what), body); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	p.rp.ServeHTTP(w, r)
}

// logResponse reads the upstream's answer whole, logs it synced (One:
// after the request's fields), and hands the client the same bytes; an
// error fails the request (502).
func (p *Proxy) logResponse(resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if pending, ok := resp.Request.Context().Value(pendingKey{}).(*bytes.Buffer); ok {
		fields(pending, []byte(resp.Status), body)
		err = p.wal.LogData(pending.Bytes(), pebble.Sync)
	} else {
		err = p.append(KindResponse, []byte(resp.Request.Header.Get(KeyHeader)), []byte(resp.Status), body)
	}
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return nil
}

// append writes one record, kind then its length-prefixed fields, and
// waits for its sync.
func (p *Proxy) append(kind byte, fs ...[]byte) error {
	b := bufs.Get().(*bytes.Buffer)
	defer bufs.Put(b)
	b.Reset()
	b.WriteByte(kind)
	fields(b, fs...)
	return p.wal.LogData(b.Bytes(), pebble.Sync)
}

// fields appends each field to b, its length first.
func fields(b *bytes.Buffer, fs ...[]byte) {
	for _, f := range fs {
		b.Write(binary.AppendUvarint(nil, uint64(len(f))))
		b.Write(f)
	}
}
