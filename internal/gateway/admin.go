package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-dev/idem/internal/inspect"
	"github.com/idem-dev/idem/store"
)

// AdminOptions configures Admin.
type AdminOptions struct {
	// Store is probed by /healthz and read by /keys. Required.
	Store store.Store
	// Metrics serves /metrics; nil means no /metrics.
	Metrics http.Handler
	// Token protects /keys (Authorization: Bearer TOKEN); "" disables
	// /keys, which shows stored responses.
	Token string
	// Draining, when set and true, makes /healthz answer 503 so that load
	// balancers stop sending traffic during shutdown.
	Draining *atomic.Bool
	// HealthTimeout bounds the store probe; 0 means 2 s.
	HealthTimeout time.Duration
	Logger        *slog.Logger
	// Scope, when set, lets /keys take method, path and tenant instead of
	// scope, and find the scope as the proxy's routes do.
	Scope func(method, target, tenant string) (string, bool)
}

// healthScope and healthKey name the record /healthz looks up. It never
// exists; the answer ErrNotFound proves the store works.
const healthScope, healthKey = "idem:healthz", "probe"

// Admin returns the admin listener's handler: GET /healthz, /metrics and
// /keys?scope=S&key=K.
func Admin(o AdminOptions) http.Handler {
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if o.Draining != nil && o.Draining.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), o.HealthTimeout)
		defer cancel()
		start := time.Now()
		_, err := o.Store.Get(ctx, healthScope, store.HashKey(healthScope, healthKey), time.Now())
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			o.Logger.Warn("idem: health check failed", "err", err)
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "store": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "store_latency": time.Since(start).String()})
	})
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	// Profiles, for finding where a gateway spends its CPU under load. The
	// admin listener is loopback-only by default. No /cmdline: the command
	// line may hold a store DSN with its password.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		if o.Token == "" {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "key inspection is disabled: set admin_token (or IDEM_ADMIN_TOKEN)"})
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(o.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem admin"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a valid admin token is required"})
			return
		}
		q := r.URL.Query()
		scope, key := q.Get("scope"), strings.TrimSpace(q.Get("key"))
		if q.Has("path") && o.Scope != nil {
			var covered bool
			if scope, covered = o.Scope(q.Get("method"), q.Get("path"), q.Get("tenant")); !covered {
				writeJSON(w, http.StatusNotFound, map[string]string{"error": "no route covers this method and path"})
				return
			}
		}
		if key == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "key is required (scope too, when tenants or endpoint scopes are used)"})
			return
		}
		now := time.Now()
		rec, err := o.Store.Get(r.Context(), scope, store.HashKey(scope, key), now)
		switch {
		case errors.Is(err, store.ErrNotFound):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no live record for this scope and key"})
			return
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, inspect.New(rec, now))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
