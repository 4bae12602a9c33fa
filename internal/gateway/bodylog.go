package gateway

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
)

// logBodyErrors wraps an upstream response's body so that a failure while
// it is read (the upstream hung up half way) is logged once, with the key
// and request ID an operator needs to find the request. ReverseProxy's own
// message for it goes to the standard logger without either.
func logBodyErrors(res *http.Response, log *slog.Logger, reqIDHeader string) {
	if res.Body == nil || res.Body == http.NoBody {
		return
	}
	res.Body = &loggedBody{ReadCloser: res.Body, log: log, res: res, reqIDHeader: reqIDHeader}
}

type loggedBody struct {
	io.ReadCloser
	log         *slog.Logger
	res         *http.Response
	reqIDHeader string
	once        sync.Once
}

func (b *loggedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.once.Do(func() {
			r := b.res.Request
			b.log.Warn("idem: the upstream's response body failed half way; the client gets a cut response",
				"method", r.Method, "path", r.URL.Path, "status", b.res.StatusCode,
				// The request ID, not the key: no raw key in lines at
				// Warn (the middleware's lines carry its hash).
				"request_id", r.Header.Get(b.reqIDHeader), "err", err)
		})
	}
	return n, err
}
