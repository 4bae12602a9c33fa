package dynamodbstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	dynamodbstore "github.com/idem-dev/idem/store/dynamodb"
	"github.com/idem-dev/idem/store/memory"
)

// api is a handler behind idemhttp's middleware on an engine over st,
// over real TCP: POST /blob answers 201 with a body of ?size= bytes and
// counts its executions.
type api struct {
	url  string
	runs atomic.Int32
}

func newAPI(t *testing.T, st store.Store) *api {
	t.Helper()
	a := &api{}
	eng := idem.New(st, idem.Policy{Lease: 10 * time.Second, TTL: time.Hour, CleanupInterval: -1})
	t.Cleanup(func() { _ = eng.Close() })
	mux := http.NewServeMux()
	mux.HandleFunc("POST /blob", func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		n, _ := strconv.Atoi(r.URL.Query().Get("size"))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Blob-Size", strconv.Itoa(n))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(bytes.Repeat([]byte{'b'}, n))
	})
	srv := httptest.NewServer(idemhttp.Middleware(eng, idemhttp.Options{SharedAnonymousScope: true})(mux))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

func (a *api) post(t *testing.T, key string, size int) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", a.url+"/blob?size="+strconv.Itoa(size), strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return testkit.Send(t, req)
}

// TestResponsePastTheItemLimit: through idemhttp's middleware, a response
// whose record would pass DynamoDB's 400 KB item reaches its client whole
// the first time; a retry gets 409 response_not_stored and never runs the
// handler again. The same holds over a sealed store, whose values the
// store cannot read. A response that fits is replayed byte for byte.
func TestResponsePastTheItemLimit(t *testing.T) {
	t.Parallel()
	ring, err := seal.ParseKeyring("a-secret-of-at-least-16-bytes-AAAA")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		sealed bool
	}{{"plain", false}, {"sealed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			raw := newStore(t, nil)
			var st store.Store = raw
			if tc.sealed {
				st = seal.Wrap(raw, ring)
			}
			a := newAPI(t, st)
			const big = 600 << 10 // under the middleware's 4 MiB, over an item
			res, body := a.post(t, "big-1", big)
			if res.StatusCode != http.StatusCreated || len(body) != big {
				t.Fatalf("first answer: %d with %d bytes, want 201 with %d", res.StatusCode, len(body), big)
			}
			for range 2 {
				res, body = a.post(t, "big-1", big)
				var p map[string]any
				_ = json.Unmarshal(body, &p)
				if res.StatusCode != http.StatusConflict || p["conflict_type"] != "response_not_stored" {
					t.Fatalf("retry: %d %s, want 409 response_not_stored", res.StatusCode, body)
				}
			}
			if n := a.runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times, want once", n)
			}
			// What the record holds: the length of the value it could not
			// keep and, for a plain response, the response without its
			// body, marked not stored.
			items := scanItems(t, raw)
			if len(items) != 1 {
				t.Fatalf("%d items, want 1", len(items))
			}
			m := items[0]
			ns, _ := strconv.Atoi(numAttr(t, m, "not_stored"))
			if ns < big {
				t.Fatalf("not_stored %d, want the value's length (over %d)", ns, big)
			}
			if !tc.sealed {
				v, ok := m["value"].(*types.AttributeValueMemberB)
				if !ok {
					t.Fatalf("value %#v", m["value"])
				}
				sr, err := idemhttp.DecodeResponse(v.Value)
				if err != nil || !sr.NotStored || sr.Status != http.StatusCreated || len(sr.Body) != 0 || sr.Header.Get("Content-Type") != "application/octet-stream" {
					t.Fatalf("stored value: %+v, %v", sr, err)
				}
			}

			const fits = 300 << 10
			res, body = a.post(t, "fits-1", fits)
			res2, body2 := a.post(t, "fits-1", fits)
			if res.StatusCode != http.StatusCreated || res2.StatusCode != http.StatusCreated ||
				res2.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(body, body2) || len(body2) != fits {
				t.Fatalf("a response that fits: %d then %d (replayed %q), %d and %d bytes",
					res.StatusCode, res2.StatusCode, res2.Header.Get("Idempotent-Replayed"), len(body), len(body2))
			}
			if n := a.runs.Load(); n != 2 {
				t.Fatalf("the handler ran %d times, want twice (once per key)", n)
			}
		})
	}
}

// TestNotStoredMarker: the marker the store writes for a response that
// does not fit reads, to idemhttp, as the same response (status, kept
// headers) whose body was not stored.
func TestNotStoredMarker(t *testing.T) {
	t.Parallel()
	rec := &recording{Store: memory.New()}
	a := newAPI(t, rec)
	if res, _ := a.post(t, "k", 64); res.StatusCode != http.StatusCreated {
		t.Fatalf("status %d", res.StatusCode)
	}
	value := rec.last.Load().([]byte)
	orig, err := idemhttp.DecodeResponse(value)
	if err != nil || orig.NotStored || len(orig.Body) != 64 {
		t.Fatalf("the stored response: %+v, %v", orig, err)
	}
	marked, err := idemhttp.DecodeResponse(dynamodbstore.NotStoredValue(value))
	if err != nil {
		t.Fatal(err)
	}
	if !marked.NotStored || marked.Status != orig.Status || len(marked.Body) != 0 ||
		len(orig.Header) == 0 || !reflect.DeepEqual(marked.Header, orig.Header) {
		t.Fatalf("marker: %+v; from %+v", marked, orig)
	}
}

// recording is a store that keeps the value of the last completion.
type recording struct {
	*memory.Store
	last atomic.Value
}

func (r *recording) Complete(ctx context.Context, c store.Completion) error {
	r.last.Store(bytes.Clone(c.Value))
	return r.Store.Complete(ctx, c)
}

// scanItems returns every item of s's table.
func scanItems(t *testing.T, s *dynamodbstore.Store) []map[string]types.AttributeValue {
	t.Helper()
	table := s.Options().Table
	out, err := newClient(t, nil).Scan(context.Background(), &dynamodb.ScanInput{TableName: &table})
	if err != nil {
		t.Fatal(err)
	}
	return out.Items
}
