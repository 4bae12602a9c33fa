package idemhttp_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// failing is a store whose reservations or completions fail on demand.
type failing struct {
	store.Store
	reserve, complete atomic.Bool
}

var errDown = errors.New("connection refused")

func (f *failing) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	if f.reserve.Load() {
		return store.Reservation{}, errDown
	}
	return f.Store.Reserve(ctx, req)
}

func (f *failing) Complete(ctx context.Context, c store.Completion) error {
	if f.complete.Load() {
		// A full disk: the engine keeps the outcome in memory at once
		// rather than retrying for its complete timeout.
		return fmt.Errorf("write: %w", store.ErrNoSpace)
	}
	return f.Store.Complete(ctx, c)
}

// records is a slog handler that keeps every record as JSON lines.
type records struct {
	mu  sync.Mutex
	buf bytes.Buffer
	h   slog.Handler
}

func newRecords() *records {
	r := &records{}
	r.h = slog.NewJSONHandler(&lockedWriter{r}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return r
}

type lockedWriter struct{ r *records }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.buf.Write(b)
}

// lines returns the records logged at level min or above.
func (r *records) lines(t *testing.T, min slog.Level) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.buf.String()), "\n") {
		var m struct{ Level string }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		var lvl slog.Level
		if err := lvl.UnmarshalText([]byte(m.Level)); err != nil {
			t.Fatal(err)
		}
		if lvl >= min {
			out = append(out, l)
		}
	}
	return out
}

// No log record at Info or above carries a raw key or tenant value,
// whatever happened: a replay, a 422, a 409 in_progress, an operator
// release, a store that fails to reserve and one that fails to record.
// Debug records carry them only with Redactor.Raw. Fails where the 409
// in_progress line logs the raw key and scope.
func TestLogsCarryNoRawKeyOrTenant(t *testing.T) {
	for _, tc := range []struct {
		name        string
		raw         bool
		credentials bool // the default tenant, from Authorization, instead of X-User-ID
	}{{"default", false, false}, {"raw-debug", true, false}, {"credentials", false, true}} {
		raw := tc.raw
		t.Run(tc.name, func(t *testing.T) {
			logs := newRecords()
			log := slog.New(logs.h)
			st := &failing{Store: memory.New()}
			eng := idem.New(st, idem.Policy{CleanupInterval: -1}, idem.WithLogger(log),
				idem.WithRedactor(idem.Redactor{Raw: raw}))
			t.Cleanup(func() { eng.Close() })
			block, started := make(chan struct{}), make(chan struct{}, 1)
			mux := http.NewServeMux()
			mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
				switch r.Header.Get("X-Mode") {
				case "slow":
					started <- struct{}{}
					<-block
				case "panic":
					panic("the handler failed half way")
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"id":"ch_1"}`))
			})
			tenantOf := idemhttp.TenantHeader("X-User-ID")
			// tenant is what must never be logged: the X-User-ID value, or
			// the credential (and the tenant its hash makes).
			tenant, hdr := "tenant-raw-4b1dcafe", "X-User-ID"
			if tc.credentials {
				tenantOf, tenant, hdr = nil, "Bearer sekrit-4b1dcafe", "Authorization"
			}
			mw, err := idemhttp.New(eng, idemhttp.Options{Tenant: tenantOf, Logger: log,
				Routes: []idemhttp.Route{{Pattern: "POST /charges"}}})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewUnstartedServer(mw(mux))
			ts.Config.ErrorLog = stdlog.New(io.Discard, "", 0) // the panicking handler's stack
			ts.Start()
			t.Cleanup(ts.Close)
			s := &server{t: t, url: ts.URL}

			keys := map[string]string{}
			key := func(name string) string {
				keys[name] = "rawkey-" + name + "-9e7f"
				return keys[name]
			}
			post := func(k, body string, extra ...string) *response {
				return s.do("POST", "/charges", body, append([]string{"Idempotency-Key", k, hdr, tenant}, extra...)...)
			}

			// A first call, its replay, and a 422 with another body.
			k := key("replayed")
			if r := post(k, `{"amount":1}`); r.Status != http.StatusCreated {
				t.Fatalf("first call: %d %s", r.Status, r.Body)
			}
			if r := post(k, `{"amount":1}`); r.Header.Get("Idempotent-Replayed") != "true" && r.Status != http.StatusCreated {
				t.Fatalf("replay: %d %s", r.Status, r.Body)
			}
			problem(t, post(k, `{"amount":2}`), http.StatusUnprocessableEntity, idemhttp.KindPayloadMismatch)

			// 409 in_progress while the first call runs.
			k = key("inprogress")
			done := make(chan *response, 1)
			go func() { done <- post(k, `{"amount":3}`, "X-Mode", "slow") }()
			<-started
			problem(t, post(k, `{"amount":3}`), http.StatusConflict, idemhttp.KindInProgress)
			close(block)
			<-done

			// A handler that panics leaves its outcome unknown; an
			// operator releases it.
			k = key("released")
			post(k, `{"amount":4}`, "X-Mode", "panic")
			problem(t, post(k, `{"amount":4}`), http.StatusConflict, idemhttp.KindOutcomeUnknown)
			rs, err := idemhttp.Compile(eng, idemhttp.Options{Tenant: tenantOf, Routes: []idemhttp.Route{{Pattern: "POST /charges"}}})
			if err != nil {
				t.Fatal(err)
			}
			scopeTenant := tenant
			if tc.credentials {
				scopeTenant, _ = idemhttp.CredentialTenant(http.Header{"Authorization": {tenant}}, nil)
			}
			forbidden := []string{tenant, scopeTenant}
			scope, ok := rs.Scope("POST", "/charges", scopeTenant)
			if !ok {
				t.Fatal("no scope for POST /charges")
			}
			if err := eng.Release(context.Background(), scope, k); err != nil {
				t.Fatalf("release: %v", err)
			}

			// A record planted under the call's identity that holds
			// another scope is refused as a store failure, logged.
			k = key("foreign")
			planted := store.ReserveRequest{Record: store.Record{KeyHash: store.HashKey(scope, k), Scope: "mallory", Key: k,
				State: store.InProgress, Token: 7}, Lease: time.Minute, TTL: time.Hour}
			if _, err := st.Store.Reserve(context.Background(), planted); err != nil {
				t.Fatal(err)
			}
			problem(t, post(k, `{"amount":7}`), http.StatusServiceUnavailable, idemhttp.KindStoreUnavailable)

			// The store fails to reserve, then to record an outcome.
			st.reserve.Store(true)
			problem(t, post(key("unreserved"), `{"amount":5}`), http.StatusServiceUnavailable, idemhttp.KindStoreUnavailable)
			st.reserve.Store(false)
			st.complete.Store(true)
			post(key("unrecorded"), `{"amount":6}`)
			st.complete.Store(false)
			eng.Close() // writes the kept outcome, or logs that it could not

			high := logs.lines(t, slog.LevelInfo)
			if len(high) < 4 {
				t.Fatalf("only %d records at Info and above; the test logs too little to tell:\n%s", len(high), strings.Join(high, "\n"))
			}
			for _, l := range high {
				for name, k := range keys {
					if strings.Contains(l, k) {
						t.Errorf("the raw key of %s is in a record at Info or above: %s", name, l)
					}
				}
				for _, f := range forbidden {
					if strings.Contains(l, f) {
						t.Errorf("the raw tenant %q is in a record at Info or above: %s", f, l)
					}
				}
			}
			if !strings.Contains(strings.Join(high, "\n"), `"scope_hash"`) {
				t.Errorf("no record names a scope by its hash:\n%s", strings.Join(high, "\n"))
			}
			debug := strings.Join(logs.lines(t, slog.LevelDebug), "\n")
			if strings.Contains(debug, tenant) != raw {
				t.Errorf("Redactor.Raw %v, but the raw tenant in Debug records is %v:\n%s", raw, !raw, debug)
			}
		})
	}
}

// The span's scope and key hashes are the engine's Redactor's, keyed when
// it has a MAC, as the log lines' are: one name for a call in both.
func TestSpanHashesAreTheRedactors(t *testing.T) {
	t.Parallel()
	red := idem.Redactor{MAC: func(b []byte) string {
		s := sha256.Sum256(append([]byte("secret:"), b...))
		return hex.EncodeToString(s[:16])
	}}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	eng := idem.New(memory.New(), idem.Policy{CleanupInterval: -1}, quietOpt, idem.WithRedactor(red))
	t.Cleanup(func() { eng.Close() })
	mw, err := idemhttp.New(eng, idemhttp.Options{Logger: quiet, TracerProvider: tp, Tenant: idemhttp.TenantHeader("X-User-ID")})
	if err != nil {
		t.Fatal(err)
	}
	url := newTestServer(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })))
	s := &server{t: t, url: url}
	if r := s.do("POST", "/x", `{}`, "Idempotency-Key", "span-key", "X-User-ID", "alice"); r.Status != http.StatusCreated {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	var got map[string]string
	for _, sp := range rec.Ended() {
		if a := attrs(sp); a["idem.key_hash"] != "" {
			got = a
		}
	}
	if got["idem.scope_hash"] != red.Scope("alice") || got["idem.key_hash"] != red.Key("alice", "span-key") {
		t.Errorf("span hashes %s %s, want the Redactor's %s %s", got["idem.scope_hash"], got["idem.key_hash"], red.Scope("alice"), red.Key("alice", "span-key"))
	}
	if got["idem.scope_hash"] == (idem.Redactor{}).Scope("alice") {
		t.Error("the span's scope hash is the unkeyed one")
	}
}
