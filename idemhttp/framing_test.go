package idemhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// encodeStored writes a stored response in the middleware's encoding
// (see idemhttp.StoredResponse), headers as name, value pairs in order,
// names as given: what anyone with write access to an unsealed store can
// put there.
func encodeStored(status int, body string, headers ...string) []byte {
	b := []byte{1, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	b = binary.BigEndian.AppendUint16(b, uint16(len(headers)/2))
	for _, f := range headers {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return append(b, body...)
}

// planting is an unsealed store into which a completed call's outcome is
// written as planted bytes instead of the middleware's own, through the
// store API: a record someone else wrote.
type planting struct {
	store.Store
	value []byte
}

func (p planting) Complete(ctx context.Context, c store.Completion) error {
	c.Value = p.value
	return p.Store.Complete(ctx, c)
}

// TestReplayRebuildsFraming: a record planted in an unsealed store whose
// stored headers carry framing (Transfer-Encoding: chunked, a wrong
// Content-Length, in canonical and other cases), hop-by-hop headers, a
// kept header under a non-canonical name and a header not kept. Its replay
// over a real TCP connection is one well-formed response: the kept header
// once under its canonical name, the body as stored with its true length,
// nothing else of the record's framing, and nothing after it.
func TestReplayRebuildsFraming(t *testing.T) {
	t.Parallel()
	const body = `{"id":"ch_1"}`
	planted := encodeStored(201, body,
		"transfer-encoding", "chunked",
		"Transfer-Encoding", "chunked",
		"content-length", "999",
		"Content-Length", "2",
		"Connection", "keep-alive, X-Drop",
		"Keep-Alive", "timeout=600",
		"Upgrade", "h2c",
		"Trailer", "X-Checksum",
		"TE", "trailers",
		"Proxy-Authenticate", "Basic",
		"Proxy-Connection", "keep-alive",
		"content-type", "application/json",
		"X-Not-Kept", "secret",
		"Bad Name", "x",
	)
	if sr, err := idemhttp.DecodeResponse(planted); err != nil || sr.Status != 201 || string(sr.Body) != body {
		t.Fatalf("the planted value is not the middleware's encoding: %+v %v", sr, err)
	}
	mem := memory.New()
	eng := idem.New(planting{mem, planted}, idem.Policy{CleanupInterval: -1})
	t.Cleanup(func() { eng.Close() })
	mw, err := idemhttp.New(eng, idemhttp.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, body)
	})))
	t.Cleanup(ts.Close)

	send := func() (*http.Response, []byte, []byte) {
		t.Helper()
		c, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		req := "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer framing-test\r\n" +
			"Idempotency-Key: framing-1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n" +
			"Connection: close\r\n\r\n{}"
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the answer is not an HTTP response: %v", err)
		}
		got, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("the answer's body does not read as framed: %v", err)
		}
		// The server closes after a Connection: close request: whatever
		// follows the response is another message a downstream parser
		// would take for the next response.
		rest, _ := io.ReadAll(br)
		return res, got, rest
	}
	if res, _, _ := send(); res.StatusCode != http.StatusCreated || res.Header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("first call: %d %v", res.StatusCode, res.Header)
	}
	res, got, rest := send()
	if res.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("second call was not a replay: %d %v", res.StatusCode, res.Header)
	}
	if res.StatusCode != 201 || string(got) != body {
		t.Errorf("replay: %d %q, want 201 %q", res.StatusCode, got, body)
	}
	if len(rest) != 0 {
		t.Errorf("%d bytes follow the replay on the connection: %q", len(rest), rest)
	}
	if len(res.TransferEncoding) != 0 || res.ContentLength != int64(len(body)) {
		t.Errorf("replay framing: Transfer-Encoding %v, Content-Length %d; want none and %d", res.TransferEncoding, res.ContentLength, len(body))
	}
	if ct := res.Header.Values("Content-Type"); len(ct) != 1 || ct[0] != "application/json" {
		t.Errorf("Content-Type %q, want the kept header once under its canonical name", ct)
	}
	for _, h := range []string{"Keep-Alive", "Upgrade", "Trailer", "Te", "Proxy-Authenticate", "Proxy-Connection", "X-Not-Kept", "X-Drop", "Bad Name"} {
		if v, ok := res.Header[h]; ok {
			t.Errorf("the replay carries the record's %s: %q", h, v)
		}
	}
	if cl := res.Header.Values("Content-Length"); len(cl) > 1 {
		t.Errorf("Content-Length %q: more than one", cl)
	}
	for k := range res.Header {
		if strings.ToLower(k) == k && k != "" {
			t.Errorf("header %q is not canonical", k)
		}
	}
	var raw bytes.Buffer
	_ = res.Header.Write(&raw)
	t.Logf("replayed headers:\n%s", raw.String())
}
