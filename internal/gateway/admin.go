package gateway

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/internal/gateway/inspect"
	"github.com/idem-dev/idem/internal/httpfield"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/replication"
)

// Releaser frees a key whose outcome is unknown, or whose holder's lease
// is over, so that the next request with it runs again. The engine's
// (*idem.Engine).Release has this shape; it returns an error matching
// store.ErrNotFound when there is nothing to release.
type Releaser interface {
	Release(ctx context.Context, scope, key string) error
}

// Cleaner removes expired records in batches, telling progress the total
// removed after each batch. (*idem.Engine).Cleanup has this shape.
type Cleaner interface {
	Cleanup(ctx context.Context, batch int, progress func(removed int)) (int, error)
}

// notReleasable is the admin API's answer to a release the engine refuses
// (idem.ErrNotReleasable).
const notReleasable = "the key's outcome is known or its holder is still working; only a key whose outcome is unknown, or whose holder's lease is over, can be released"

// AdminOptions configures Admin.
type AdminOptions struct {
	// Store is probed by /readyz and read by /api/keys. Required.
	Store store.Store
	// Replication, when set, is how the store replicates (read at start):
	// /api/stats carries it, and the admin page says what a failover
	// would do to the promise.
	Replication *replication.Status
	// Metrics serves /metrics; nil means no /metrics.
	Metrics http.Handler
	// Gatherer is read by /api/stats, the admin page's numbers; nil means
	// the page shows no rates.
	Gatherer prometheus.Gatherer
	// Token protects everything but /healthz, /readyz and /metrics
	// (Authorization: Bearer TOKEN): the admin page and its API, key
	// inspection, release, cleanup and /debug/pprof. "" disables them all,
	// since they show stored responses and what the process holds.
	Token string
	// Draining, when set and true, makes /readyz answer 503 so that load
	// balancers stop sending traffic during shutdown.
	Draining *atomic.Bool
	// Upstream, when set, is called by /readyz: the gateway is ready only
	// when the API behind it is reachable.
	Upstream func(ctx context.Context) error
	// HealthTimeout bounds each readiness probe; 0 means 2 s.
	HealthTimeout time.Duration
	// Releaser serves the release of a key (POST /api/keys/release): the
	// gateway's engine. Required for release; nil answers 501.
	Releaser Releaser
	// Cleaner serves POST /api/cleanup; nil disables it.
	Cleaner Cleaner
	// CountExpired serves POST /api/cleanup?dry_run=true; nil means the
	// store cannot count without removing.
	CountExpired func(ctx context.Context) (int, error)
	// Tracker lists the keys this gateway holds and the ones that ended
	// failed; nil means the page lists none.
	Tracker *Tracker
	// Scope, when set, lets the key endpoints take method, path and tenant
	// instead of scope, and find the scope as the proxy's routes do.
	Scope func(method, target, tenant string) (string, bool)
	// KeyOf, when set, lets the key endpoints take method, path and the
	// request's own headers (header=Name:%20value, repeated) instead of
	// scope or tenant: the scope and key the proxy's routes give such a
	// request (idemhttp.Routes.KeyOf), for tenants an operator knows by
	// their credentials or header rather than by their hash.
	KeyOf func(r *http.Request) (scope, key string, err error)
	// Redactor prints scopes and keys in the admin API's log lines and
	// the admin page's lists: the engine's (idem.Engine.Redactor).
	Redactor idem.Redactor
	// Logger logs the admin API's actions; nil means slog.Default().
	Logger *slog.Logger
	// HideSecrets hides secrets (a store DSN's password) in the store and
	// upstream errors the admin listener answers with; nil leaves them.
	HideSecrets func(string) string
}

// healthScope and healthKey name the record /readyz looks up. It never
// exists; the answer ErrNotFound proves the store works.
const healthScope, healthKey = "idem:healthz", "probe"

// Admin returns the admin listener's handler:
//
//	GET  /healthz                 liveness: the process serves (200)
//	GET  /readyz                  readiness: not draining, store reachable and writable, upstream reachable;
//	                              ?upstream=report reports the upstream without gating on it
//	GET  /metrics                 Prometheus
//	GET  /                        the admin page (token)
//	GET  /api/stats               the page's numbers (token)
//	GET  /api/keys?scope=S&key=K  one record as JSON (token); /keys is the old name;
//	                              method=M&path=P&tenant=T instead of scope, with AdminOptions.Scope
//	POST /api/keys/release?scope=S&key=K   release an outcome-unknown key (token)
//	POST /api/cleanup[?batch=N&dry_run=true]  remove expired records, progress as JSON lines (token)
//	GET  /debug/pprof/...         profiles (token)
func Admin(o AdminOptions) http.Handler {
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	a := &admin{o: o}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		// Liveness only: a store or upstream outage must not get every
		// replica restarted; /readyz takes the gateway out of rotation.
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	mux.Handle("GET /{$}", a.auth(http.HandlerFunc(a.page)))
	mux.Handle("GET /api/stats", a.auth(http.HandlerFunc(a.stats)))
	mux.Handle("GET /api/keys", a.auth(http.HandlerFunc(a.inspectKey)))
	mux.Handle("GET /keys", a.auth(http.HandlerFunc(a.inspectKey)))
	mux.Handle("POST /api/keys/release", a.auth(http.HandlerFunc(a.release)))
	mux.Handle("POST /api/cleanup", a.auth(http.HandlerFunc(a.cleanup)))
	// Profiles, for finding where a gateway spends its CPU under load:
	// they show what the process holds, so only with the token. No
	// /cmdline: the command line may hold a store DSN with its password.
	mux.Handle("GET /debug/pprof/", a.auth(http.HandlerFunc(pprof.Index)))
	mux.Handle("GET /debug/pprof/profile", a.auth(http.HandlerFunc(pprof.Profile)))
	mux.Handle("GET /debug/pprof/symbol", a.auth(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("GET /debug/pprof/trace", a.auth(http.HandlerFunc(pprof.Trace)))
	return mux
}

// AdminWarning returns the warning to log when the admin listener at addr
// can be reached from other hosts without a token ("" when it is fine):
// /metrics and the readiness probe are then open to the network, and every
// other admin feature is off.
func AdminWarning(addr, token string) string {
	if token != "" {
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if host == "localhost" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	return fmt.Sprintf("the admin listener %s is reachable from other hosts and has no admin_token: /metrics and /readyz are open to the network, and the admin page, key inspection, release, cleanup and pprof are off; set admin_token (IDEM_ADMIN_TOKEN), or listen on 127.0.0.1", addr)
}

type admin struct{ o AdminOptions }

// authorized reports whether r carries the admin token.
func (a *admin) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && a.o.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(a.o.Token)) == 1
}

// errText is what the admin listener shows of err: its message with
// secrets hidden.
func (a *admin) errText(err error) string {
	if a.o.HideSecrets == nil {
		return err.Error()
	}
	return a.o.HideSecrets(err.Error())
}

// auth lets a request through when it carries the admin token.
func (a *admin) auth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.o.Token == "" {
			writeProblem(w, http.StatusNotFound, "the admin page, key inspection, release, cleanup and pprof are disabled: set admin_token (or IDEM_ADMIN_TOKEN)")
			return
		}
		if !a.authorized(r) {
			if r.URL.Path == "/" {
				// The page itself holds no data: it asks for the token
				// and sends it with each of its API calls.
				a.page(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem admin"`)
			writeProblem(w, http.StatusUnauthorized, "a valid admin token is required (Authorization: Bearer TOKEN)")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (a *admin) readyz(w http.ResponseWriter, r *http.Request) {
	if a.o.Draining != nil && a.o.Draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.o.HealthTimeout)
	defer cancel()
	// /readyz is open to whoever reaches the listener: the raw errors
	// (hosts, users, paths, what the store said) only with the admin token.
	detail := func(short string, err error) string {
		if a.authorized(r) {
			return short + ": " + a.errText(err)
		}
		return short
	}
	res := map[string]string{"status": "ok"}
	status := http.StatusOK
	start := time.Now()
	_, err := a.o.Store.Get(ctx, healthScope, store.HashKey(healthScope, healthKey))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		a.o.Logger.Warn("idem: readiness: the store does not answer", "err", a.errText(err))
		res["store"], status = detail("store unavailable", err), http.StatusServiceUnavailable
	} else if werr := writable(ctx, a.o.Store); werr != nil {
		// A full disk: replays of recorded outcomes still work, new calls
		// do not. Not ready, so that traffic goes to replicas that can
		// take them; /healthz stays 200, since a restart frees no space.
		a.o.Logger.Warn("idem: readiness: the store cannot write", "err", a.errText(werr))
		res["store"], status = detail("store not writable", werr), http.StatusServiceUnavailable
	} else {
		res["store"] = "ok"
		res["store_latency"] = time.Since(start).String()
	}
	if a.o.Upstream != nil {
		if err := a.o.Upstream(ctx); err != nil {
			a.o.Logger.Warn("idem: readiness: the upstream is not reachable", "err", a.errText(err))
			res["upstream"] = detail("upstream unavailable", err)
			// A gateway in front of a shared upstream stays ready when it
			// is down: replays and 502s still come from it, and an
			// upstream outage must not take every replica out at once.
			if r.URL.Query().Get("upstream") != "report" {
				status = http.StatusServiceUnavailable
			}
		} else {
			res["upstream"] = "ok"
		}
	}
	if status != http.StatusOK {
		res["status"] = "unavailable"
	}
	writeJSON(w, status, res)
}

// writable reports why s cannot take new writes, for the stores that can
// tell (the embedded ones, on a full disk), looking through the wrappers
// the gateway puts around its store; nil when it can, or cannot tell.
func writable(ctx context.Context, s store.Store) error {
	for s != nil {
		if w, ok := s.(interface{ Writable(context.Context) error }); ok {
			return w.Writable(ctx)
		}
		u, ok := s.(interface{ Unwrap() store.Store })
		if !ok {
			return nil
		}
		s = u.Unwrap()
	}
	return nil
}

// keyParams reads scope (or method, path and tenant, when the routes can
// tell the scope) and key, or answers 400 or 404.
func (a *admin) keyParams(w http.ResponseWriter, r *http.Request) (scope, key string, ok bool) {
	q := r.URL.Query()
	scope, key = q.Get("scope"), strings.TrimSpace(q.Get("key"))
	if q.Has("path") && q.Has("header") && a.o.KeyOf != nil {
		return a.keyOfRequest(w, q)
	}
	if q.Has("path") && a.o.Scope != nil {
		method := q.Get("method")
		if method == "" {
			method = http.MethodPost
		}
		var covered bool
		if scope, covered = a.o.Scope(method, q.Get("path"), q.Get("tenant")); !covered {
			writeProblem(w, http.StatusNotFound, "no route covers this method and path")
			return "", "", false
		}
	}
	if key == "" {
		writeProblem(w, http.StatusBadRequest, "key is required (scope too, when tenants or endpoint scopes are used)")
		return "", "", false
	}
	return scope, key, true
}

// keyOfRequest finds the scope and key of the request that method, path,
// header and key describe, as the proxy's routes do, or answers 400 or
// 404.
func (a *admin) keyOfRequest(w http.ResponseWriter, q url.Values) (scope, key string, ok bool) {
	method := q.Get("method")
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, q.Get("path"), nil)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "method and path do not make a request: "+err.Error())
		return "", "", false
	}
	for _, h := range q["header"] {
		name, value, found := strings.Cut(h, ":")
		if !found || strings.TrimSpace(name) == "" {
			writeProblem(w, http.StatusBadRequest, "header must be \"Name: value\"")
			return "", "", false
		}
		req.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if k := strings.TrimSpace(q.Get("key")); k != "" {
		req.Header.Set(idemhttp.HeaderName, httpfield.FormatKey(k))
	}
	scope, key, err = a.o.KeyOf(req)
	switch {
	case errors.Is(err, idemhttp.ErrNotCovered):
		writeProblem(w, http.StatusNotFound, "no route covers this method and path")
		return "", "", false
	case err != nil:
		writeProblem(w, http.StatusBadRequest, err.Error())
		return "", "", false
	}
	return scope, key, true
}

func (a *admin) inspectKey(w http.ResponseWriter, r *http.Request) {
	scope, key, ok := a.keyParams(w, r)
	if !ok {
		return
	}
	rec, err := idem.FindRecord(r.Context(), a.o.Store, scope, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, http.StatusNotFound, "no live record for this scope and key")
		return
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, a.errText(err))
		return
	}
	v := inspect.New(rec)
	writeJSON(w, http.StatusOK, struct {
		inspect.Record
		OutcomeUnknown bool `json:"outcome_unknown"`
		// Logged is how logs and traces name this key, so that an
		// operator can find its lines.
		Logged printed `json:"logged"`
	}{v, idem.RecordOf(rec).Releasable(), a.printed(scope, key)})
}

// printed is how logs and trace attributes name a key (idem.Redactor).
type printed struct {
	ScopeHash string `json:"scope_hash"`
	KeyHash   string `json:"key_hash"`
}

func (a *admin) printed(scope, key string) printed {
	return printed{a.o.Redactor.Scope(scope), a.o.Redactor.Key(scope, key)}
}

// withHashes fills in how logs name each key.
func (a *admin) withHashes(keys []TrackedKey) []TrackedKey {
	for i, k := range keys {
		p := a.printed(k.Scope, k.Key)
		keys[i].ScopeHash, keys[i].KeyHash = p.ScopeHash, p.KeyHash
	}
	return keys
}

func (a *admin) release(w http.ResponseWriter, r *http.Request) {
	scope, key, ok := a.keyParams(w, r)
	if !ok {
		return
	}
	if a.o.Releaser == nil {
		writeProblem(w, http.StatusNotImplemented, "release is not available on this admin listener")
		return
	}
	err := a.o.Releaser.Release(r.Context(), scope, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, http.StatusNotFound, "no live record for this scope and key: nothing to release")
		return
	case errors.Is(err, idem.ErrNotReleasable):
		writeProblem(w, http.StatusConflict, notReleasable+" ("+strings.TrimPrefix(err.Error(), "idem: the key's record cannot be released: ")+")")
		return
	case errors.Is(err, idem.ErrLeaseLost):
		writeProblem(w, http.StatusConflict, "the key's record changed while it was being released; inspect it again")
		return
	case errors.Is(err, idem.ErrInvalidKey):
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, a.errText(err))
		return
	}
	a.o.Logger.Warn("idem: key released by an operator; its next request runs the operation again",
		append(a.o.Redactor.LogAttrs(slog.LevelWarn, scope, key), "remote", r.RemoteAddr)...)
	if a.o.Tracker != nil {
		a.o.Tracker.forget(scope, key)
	}
	writeJSON(w, http.StatusOK, map[string]any{"released": true, "scope": scope, "key": key})
}

// cleanup removes expired records and streams its progress as JSON lines:
// {"removed":N} after each batch, then {"removed":N,"done":true,...}.
func (a *admin) cleanup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	dry, _ := strconv.ParseBool(q.Get("dry_run"))
	batch := 1000
	if v := q.Get("batch"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			writeProblem(w, http.StatusBadRequest, "batch must be a positive number")
			return
		}
		batch = n
	}
	if dry {
		if a.o.CountExpired == nil {
			writeProblem(w, http.StatusNotImplemented, "this store cannot count expired records without removing them; nothing was removed")
			return
		}
		n, err := a.o.CountExpired(r.Context())
		if err != nil {
			writeProblem(w, http.StatusServiceUnavailable, a.errText(err))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"expired": n, "dry_run": true, "done": true})
		return
	}
	if a.o.Cleaner == nil {
		writeProblem(w, http.StatusNotImplemented, "cleanup is not available on this admin listener")
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	start := time.Now()
	n, err := a.o.Cleaner.Cleanup(r.Context(), batch, func(removed int) {
		_ = enc.Encode(map[string]any{"removed": removed})
		if flusher != nil {
			flusher.Flush()
		}
	})
	end := map[string]any{"removed": n, "done": true, "took": time.Since(start).Round(time.Millisecond).String()}
	if err != nil {
		end["error"] = a.errText(err)
	}
	_ = enc.Encode(end)
}

//go:embed adminpage/index.html
var pageFS embed.FS

func (a *admin) page(w http.ResponseWriter, _ *http.Request) {
	b, err := pageFS.ReadFile("adminpage/index.html")
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, a.errText(err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// Everything the page needs is inline; nothing loads from elsewhere.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
}

// Stats is what /api/stats answers: totals since start (the page turns
// them into rates), the store's latency histogram, and the keys.
type Stats struct {
	Time     time.Time        `json:"time"`
	Draining bool             `json:"draining"`
	Totals   map[string]int64 `json:"totals"`
	// Store is the store operations' latency histogram, all operations
	// together.
	Store      Histogram    `json:"store"`
	InProgress []TrackedKey `json:"in_progress"`
	// Replication is how the store replicates and what a failover would
	// do to the promise; absent for stores without replicas to tell of.
	Replication    *ReplicationInfo `json:"replication,omitempty"`
	OutcomeUnknown []TrackedKey     `json:"outcome_unknown"`
	Conflicts      map[string]int64 `json:"conflicts"`
}

// ReplicationInfo is replication.Status as /api/stats carries it.
type ReplicationInfo struct {
	Mode         string `json:"mode"`
	Replicas     int    `json:"replicas"`
	Synchronous  int    `json:"synchronous"`
	SyncReplicas int    `json:"sync_replicas"`
	Promise      string `json:"promise"`
	Warn         bool   `json:"warn"`
}

// Histogram is a cumulative histogram.
type Histogram struct {
	Count   uint64    `json:"count"`
	Sum     float64   `json:"sum_seconds"`
	Bounds  []float64 `json:"bounds"`
	Buckets []uint64  `json:"buckets"` // cumulative counts, one per bound
}

// totals maps the page's names to idem's counters.
var totals = map[string]string{
	"executions":      "idem_executions_total",
	"replays":         "idem_replays_total",
	"conflicts":       "idem_conflicts_total",
	"rejections":      "idem_rejections_total",
	"pass_throughs":   "idem_pass_throughs_total",
	"unprotected":     "idem_unprotected_total",
	"upstream_errors": "idem_upstream_errors_total",
	"records_lost":    "idem_store_records_lost_total",
}

func (a *admin) stats(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s := Stats{Time: now, Totals: map[string]int64{}, Conflicts: map[string]int64{},
		InProgress: []TrackedKey{}, OutcomeUnknown: []TrackedKey{}}
	for name := range totals {
		s.Totals[name] = 0
	}
	if a.o.Draining != nil {
		s.Draining = a.o.Draining.Load()
	}
	if st := a.o.Replication; st != nil {
		s.Replication = &ReplicationInfo{Mode: string(st.Mode), Replicas: st.Replicas, Synchronous: st.Synchronous,
			SyncReplicas: st.SyncReplicas, Promise: st.Promise(), Warn: st.Warn()}
	}
	if a.o.Gatherer != nil {
		mfs, err := a.o.Gatherer.Gather()
		if err != nil {
			writeProblem(w, http.StatusInternalServerError, a.errText(err))
			return
		}
		s.addMetrics(mfs)
	}
	if t := a.o.Tracker; t != nil {
		s.InProgress = a.withHashes(t.InProgress())
		s.OutcomeUnknown = a.withHashes(a.releasable(r.Context(), t, now, s.OutcomeUnknown))
	}
	writeJSON(w, http.StatusOK, s)
}

// addMetrics adds the page's totals, conflicts and store latencies from
// the gathered metric families.
func (s *Stats) addMetrics(mfs []*dto.MetricFamily) {
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	for name, metric := range totals {
		if mf := byName[metric]; mf != nil {
			for _, m := range mf.GetMetric() {
				s.Totals[name] += int64(m.GetCounter().GetValue())
			}
		}
	}
	if mf := byName["idem_conflicts_total"]; mf != nil {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "conflict_type" {
					s.Conflicts[l.GetValue()] += int64(m.GetCounter().GetValue())
				}
			}
		}
	}
	if mf := byName["idem_store_operation_duration_seconds"]; mf != nil {
		s.Store = mergeHistograms(mf)
	}
}

// releasable appends to keys the tracker's recently failed and stale keys
// that an operator may release now (idem.Record.Releasable): the list shows only
// those whose outcome is still unknown.
func (a *admin) releasable(ctx context.Context, t *Tracker, now time.Time, keys []TrackedKey) []TrackedKey {
	ctx, cancel := context.WithTimeout(ctx, a.o.HealthTimeout)
	defer cancel()
	for _, k := range t.Candidates(now) {
		rec, err := idem.FindRecord(ctx, a.o.Store, k.Scope, k.Key)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				t.forget(k.Scope, k.Key)
			}
			continue
		}
		if idem.RecordOf(rec).Releasable() {
			k.State = string(rec.State)
			keys = append(keys, k)
		}
	}
	return keys
}

func mergeHistograms(mf *dto.MetricFamily) Histogram {
	var h Histogram
	for i, m := range mf.GetMetric() {
		hm := m.GetHistogram()
		h.Count += hm.GetSampleCount()
		h.Sum += hm.GetSampleSum()
		for j, b := range hm.GetBucket() {
			if i == 0 {
				h.Bounds = append(h.Bounds, b.GetUpperBound())
				h.Buckets = append(h.Buckets, 0)
			}
			if j < len(h.Buckets) {
				h.Buckets[j] += b.GetCumulativeCount()
			}
		}
	}
	return h
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

// writeProblem answers an admin request as RFC 9457 problem+json.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	b, _ := json.MarshalIndent(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	}, "", "  ")
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
