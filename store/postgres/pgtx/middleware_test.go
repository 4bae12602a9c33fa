package pgtx_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/postgres/pgtx"
)

// behind serves POST /orders through the middleware over b's engine: the
// handler inserts one effect row in the call's transaction (Store.Tx),
// then ends as end says.
func (b *bundle) behind(t *testing.T, end func(w http.ResponseWriter, r *http.Request)) *httptest.Server {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := b.store.Tx(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h, _ := idem.HoldFrom(r.Context())
		if _, err := tx.Exec(r.Context(), `INSERT INTO `+b.rows+` (record_id, what) VALUES ($1, 'order')`, h.ID); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		end(w, r)
	})
	mw := idemhttp.Middleware(b.eng, idemhttp.Options{
		Tenant: idemhttp.TenantNone, Logger: slog.New(slog.DiscardHandler),
		Routes: []idemhttp.Route{{Pattern: "POST /orders"}},
	})
	srv := httptest.NewUnstartedServer(mw(h))
	// net/http logs the handler's panic; the test expects it.
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// effectsOf returns the business rows of the record of key in scope.
func (b *bundle) effectsOf(t *testing.T, scope, key string) []string {
	t.Helper()
	var got []string
	rows, err := b.pool.Query(bg, `SELECT what FROM `+b.rows+` WHERE record_id = $1`, idem.RecordID(scope, key))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			t.Fatal(err)
		}
		got = append(got, w)
	}
	return got
}

// retriedOnce retries key twice: the first retry runs (201, not
// replayed), the second is replayed, and one row stands for the key.
func (b *bundle) retriedOnce(t *testing.T, srv *httptest.Server, key string) {
	t.Helper()
	for i, want := range []string{"false", "true"} {
		status, hdr, body, err := postOrder(t, srv, key)
		if err != nil || status != http.StatusCreated || hdr.Get("Idempotent-Replayed") != want {
			t.Fatalf("retry %d: %d %v %s %v", i+1, status, hdr, body, err)
		}
	}
	if got := b.effectsOf(t, "", key); len(got) != 1 {
		t.Fatalf("rows after the retries: %v, want one", got)
	}
}

func postOrder(t *testing.T, srv *httptest.Server, key string) (int, http.Header, string, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"item":1}`))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(body), nil
}

func created(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, `{"order":"o-1"}`)
}

// TestBehindMiddlewareNothingRanIsReleased: behind idemhttp, a handler that
// panics, or reports an unknown outcome, after writing in its transaction
// but before the commit leaves no row, and its key free: the retry runs
// once more and commits one row (the key was locked as "outcome unknown"
// until its TTL, though the rollback proved nothing ran).
func TestBehindMiddlewareNothingRanIsReleased(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]func(w http.ResponseWriter, r *http.Request){
		"panic": func(http.ResponseWriter, *http.Request) { panic("bug after the insert") },
		"reported unknown": func(w http.ResponseWriter, r *http.Request) {
			idemhttp.ReportOutcomeUnknown(w)
			http.Error(w, "the payment service did not answer", http.StatusBadGateway)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, idem.Policy{})
			failing := true
			srv := b.behind(t, func(w http.ResponseWriter, r *http.Request) {
				if failing {
					fail(w, r)
					return
				}
				created(w, r)
			})
			_, _, _, _ = postOrder(t, srv, "k") // a panic cuts the connection
			if got := b.effectsOf(t, "", "k"); len(got) != 0 {
				t.Fatalf("rows after the failure: %v", got)
			}
			if r, err := b.store.Get(bg, "", store.HashKey("", "k")); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("record after the failure: %+v %v, want the key released", r, err)
			}
			failing = false
			b.retriedOnce(t, srv, "k")
		})
	}
}

// TestBehindMiddlewareCutAtCommit: the connection of the call's
// transaction is cut between the completion's UPDATE and the COMMIT. The
// transaction did not commit, the fenced release frees the key, and the
// retry commits one row: never a row without its record, nor a record
// without its row.
func TestBehindMiddlewareCutAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	var pid int32
	srv := b.behind(t, func(w http.ResponseWriter, r *http.Request) {
		tx, _ := b.store.Tx(r.Context())
		if err := tx.QueryRow(r.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		created(w, r)
	})
	cut := true
	pgtx.SetBeforeCommit(b.store, func() {
		if cut {
			cut = false
			if _, err := b.pool.Exec(bg, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Error(err)
			}
		}
	})
	status, _, body, err := postOrder(t, srv, "k")
	if err == nil && status == http.StatusCreated {
		t.Fatalf("a cut COMMIT answered 201 %s", body)
	}
	rows := b.effectsOf(t, "", "k")
	rec, rerr := b.store.Get(bg, "", store.HashKey("", "k"))
	if len(rows) != 0 || !errors.Is(rerr, store.ErrNotFound) {
		t.Fatalf("after the cut: rows %v, record %+v %v; want neither", rows, rec, rerr)
	}
	b.retriedOnce(t, srv, "k")
}

// TestBehindMiddlewareNoKey: a request without a key on a route whose key
// is optional reaches its handler with no reservation; Tx says so.
func TestBehindMiddlewareNoKey(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Policy{})
	srv := b.behind(t, created)
	status, _, body, err := postOrder(t, srv, "")
	if err != nil || status != http.StatusInternalServerError || !strings.Contains(body, "no Idempotency-Key") {
		t.Fatalf("keyless request: %d %q %v", status, body, err)
	}
}
