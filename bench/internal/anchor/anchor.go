// Package anchor is the durable proxy the gateway on the file store is
// measured against: httputil.ReverseProxy with two synced appends to a
// Pebble write-ahead log per request, one before forwarding the request
// and one after the upstream's answer, before it goes back to the client.
//
// It is the least a durable idempotency gateway must do on the write path
// (persist the reservation, persist the outcome, each before it is
// acknowledged) with nothing else: no index, no lookup, no replay, no
// fingerprint. A gateway's first calls against it show what idem's own
// work costs above the two fsyncs, with the fsyncs done by an engine many
// Go services already trust; against the plain proxy they also show the
// fsyncs themselves.
package anchor

import (
	"bytes"
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
	KindRequest  = 'Q' // before forwarding: key, method, path, body
	KindResponse = 'A' // after the answer: key, status, body
)

// KeyHeader is the header the key is read from; a request without one
// is still logged, with an empty key.
const KeyHeader = "Idempotency-Key"

// Proxy forwards to an upstream, appending to its WAL with pebble.Sync
// before and after.
type Proxy struct {
	wal WAL
	rp  *httputil.ReverseProxy
}

var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// New returns a proxy to upstream through transport (nil means
// http.DefaultTransport), logging to wal.
func New(upstream *url.URL, transport http.RoundTripper, wal WAL) *Proxy {
	p := &Proxy{wal: wal}
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

// ServeHTTP logs the request synced, forwards it, and logs the answer
// synced before it is written back (ModifyResponse).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := p.append(KindRequest, r.Header.Get(KeyHeader), r.Method+" "+r.URL.Path, body); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	p.rp.ServeHTTP(w, r)
}

// logResponse reads the upstream's answer whole, logs it synced, and hands
// the client the same bytes; an error fails the request (502).
func (p *Proxy) logResponse(resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if err := p.append(KindResponse, resp.Request.Header.Get(KeyHeader), resp.Status, body); err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return nil
}

// append writes one record, kind then three length-prefixed fields, and
// waits for its sync.
func (p *Proxy) append(kind byte, key, what string, body []byte) error {
	b := bufs.Get().(*bytes.Buffer)
	defer bufs.Put(b)
	b.Reset()
	b.WriteByte(kind)
	for _, f := range [][]byte{[]byte(key), []byte(what), body} {
		b.Write(binary.AppendUvarint(nil, uint64(len(f))))
		b.Write(f)
	}
	return p.wal.LogData(b.Bytes(), pebble.Sync)
}
