package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/replication"
)

// Metrics is a registry with idem's collectors. Its zero value is not
// usable; call New.
type Metrics struct {
	Registry *prometheus.Registry

	executions  *prometheus.CounterVec
	replays     *prometheus.CounterVec
	conflicts   *prometheus.CounterVec
	rejections  *prometheus.CounterVec
	passes      *prometheus.CounterVec
	unprotected *prometheus.CounterVec
	upstream    *prometheus.CounterVec
	storeOps    *prometheus.HistogramVec
	freed       prometheus.Counter
	lost        prometheus.Counter
	unrouted    prometheus.Counter
	replication *prometheus.GaugeVec
	replicas    *prometheus.GaugeVec
}

// New returns metrics registered in a new registry, with the Go and process
// collectors. Every labelled series whose label values are known exists
// from the start at 0, for each of routes (the configured patterns) where
// the series is per route: Prometheus's increase() and rate() see a
// series' first sample as its start, so a counter born at 1 on its first
// event would show no increase, and an alert on the first outage or the
// first unknown outcome would never fire.
func New(routes ...string) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "idem", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		Registry:    prometheus.NewRegistry(),
		executions:  counter("executions_total", "Keyed requests for which the upstream ran, by response status class.", "route", "code"),
		replays:     counter("replays_total", "Stored responses replayed instead of running the upstream.", "route", "code"),
		conflicts:   counter("conflicts_total", "Keyed requests refused because of an existing record, by conflict type.", "route", "conflict_type"),
		rejections:  counter("rejections_total", "Answers idem gave itself instead of the upstream's, by kind.", "route", "kind"),
		passes:      counter("pass_throughs_total", "Requests on a route that carried no key and passed through.", "route"),
		unprotected: counter("unprotected_total", "Keyed requests run without the store's protection (on_store_error: fail_open).", "route"),
		upstream:    counter("upstream_errors_total", "Upstream calls that failed: unreachable (nothing sent), timeout or error.", "kind"),
		freed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idem", Name: "reservations_freed_total",
			Help: "Reservations whose answer was lost (the store applied them, the connection broke before the answer came back), freed so that the key's retry runs at once."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idem", Name: "store_records_lost_total",
			Help: "Records the store lost under their holder (a completion found no record: a failover to a replica that never had it). Its retry runs the key again; set sync_replicas."}),
		unrouted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idem", Name: "unrouted_keyed_requests_total",
			Help: "Keyed requests with a method that changes things that no route covered: they reached the upstream without protection (the gateway logs each path once)."}),
		replication: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "idem", Name: "store_replication",
			Help: "How the store's server replicates, read at start: 1 for its mode (none, async, sync, unknown), 0 for the others. async or unknown: a failover may lose the last writes."}, []string{"mode"}),
		replicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "idem", Name: "store_replicas",
			Help: "The store's replicas at start: connected, and synchronous (every write waits for them)."}, []string{"kind"}),
		storeOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "idem",
			Name:      "store_operation_duration_seconds",
			Help:      "Latency of store operations, by operation and result.",
			// From an in-process store's answers to a struggling remote store's.
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"operation", "result"}),
	}
	m.Registry.MustRegister(m.executions, m.replays, m.conflicts, m.rejections, m.passes, m.unprotected, m.upstream, m.freed, m.lost, m.unrouted, m.replication, m.replicas, m.storeOps,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.precreate(routes)
	return m
}

// The label values each labelled series can take, besides routes.
var (
	// codes are what class returns.
	codes = []string{"1xx", "2xx", "3xx", "4xx", "5xx", "other"}
	// upstreamKinds are the kinds gateway.Options.OnUpstreamError reports.
	upstreamKinds = []string{"unreachable", "timeout", "error"}
	// operations are the store.Store methods timed decorates, results
	// what result returns.
	operations = []string{"reserve", "get", "renew", "complete", "release", "cleanup"}
	results    = []string{"ok", "not_found", "lease_lost", "canceled", "error"}
)

// routeKinds are the kinds of answer a route gives itself: every kind but
// those net/http's listener answers before any route is matched.
func routeKinds() []idemhttp.Kind {
	var out []idemhttp.Kind
	for k := range idemhttp.DefaultStatus() {
		if k != idemhttp.KindHeadersTooLarge && k != idemhttp.KindMalformedRequest {
			out = append(out, k)
		}
	}
	return out
}

// precreate makes every known series exist at 0 (see New).
func (m *Metrics) precreate(routes []string) {
	for _, k := range upstreamKinds {
		m.upstream.WithLabelValues(k)
	}
	for _, op := range operations {
		for _, r := range results {
			m.storeOps.WithLabelValues(op, r)
		}
	}
	m.passes.WithLabelValues("") // requests no route covers
	kinds := routeKinds()
	for _, route := range routes {
		for _, c := range codes {
			m.executions.WithLabelValues(route, c)
			m.replays.WithLabelValues(route, c)
		}
		for _, k := range kinds {
			m.rejections.WithLabelValues(route, string(k))
			if k.IsConflict() {
				m.conflicts.WithLabelValues(route, string(k))
			}
		}
		m.passes.WithLabelValues(route)
		m.unprotected.WithLabelValues(route)
	}
}

// ReservationFreed counts a reservation the engine freed after its answer
// was lost (idem.WithOnFreed).
func (m *Metrics) ReservationFreed(string) { m.freed.Inc() }

// RecordLost counts a record the store lost under its holder
// (idem.WithOnRecordLost).
func (m *Metrics) RecordLost(string) { m.lost.Inc() }

// SetReplication exposes how the store replicates (dsn.Opened.Replication).
func (m *Metrics) SetReplication(st replication.Status) {
	for _, mode := range replication.Modes {
		v := 0.0
		if mode == st.Mode {
			v = 1
		}
		m.replication.WithLabelValues(string(mode)).Set(v)
	}
	m.replicas.WithLabelValues("connected").Set(float64(st.Replicas))
	m.replicas.WithLabelValues("synchronous").Set(float64(st.Synchronous))
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Observe counts one middleware event; it is idemhttp.Options.Observe.
func (m *Metrics) Observe(_ *http.Request, e idemhttp.Event) {
	switch e.Outcome {
	case idemhttp.OutcomeExecuted:
		m.executions.WithLabelValues(e.Route, class(e.Status)).Inc()
	case idemhttp.OutcomeReplayed:
		m.replays.WithLabelValues(e.Route, class(e.Status)).Inc()
	case idemhttp.OutcomeRejected:
		m.rejections.WithLabelValues(e.Route, string(e.Kind)).Inc()
		if e.Kind.IsConflict() {
			m.conflicts.WithLabelValues(e.Route, string(e.Kind)).Inc()
		}
	case idemhttp.OutcomePassThrough:
		m.passes.WithLabelValues(e.Route).Inc()
	case idemhttp.OutcomeUnrouted:
		m.unrouted.Inc()
	case idemhttp.OutcomeUnprotected:
		m.unprotected.WithLabelValues(e.Route).Inc()
		m.executions.WithLabelValues(e.Route, class(e.Status)).Inc()
	}
}

// UpstreamError counts a failed upstream call; it is
// gateway.Options.OnUpstreamError.
func (m *Metrics) UpstreamError(kind string) { m.upstream.WithLabelValues(kind).Inc() }

func class(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status/100) + "xx"
}

// WrapStore returns s with every operation timed.
func (m *Metrics) WrapStore(s store.Store) store.Store { return &timed{s: s, h: m.storeOps} }

// timed decorates a store with latency metrics.
type timed struct {
	s store.Store
	h *prometheus.HistogramVec
}

var _ store.Store = (*timed)(nil)

// Unwrap returns the decorated store, for callers that look for optional
// methods.
func (t *timed) Unwrap() store.Store { return t.s }

func (t *timed) observe(op string, start time.Time, err error) {
	t.h.WithLabelValues(op, result(err)).Observe(time.Since(start).Seconds())
}

// result names an operation's outcome; the expected refusals are not
// errors.
func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, store.ErrNotFound):
		return "not_found"
	case errors.Is(err, store.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

func (t *timed) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	start := time.Now()
	r, err := t.s.Reserve(ctx, req)
	t.observe("reserve", start, err)
	return r, err
}

func (t *timed) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	start := time.Now()
	r, err := t.s.Get(ctx, scope, keyHash)
	t.observe("get", start, err)
	return r, err
}

func (t *timed) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	start := time.Now()
	err := t.s.Renew(ctx, f, lease)
	t.observe("renew", start, err)
	return err
}

func (t *timed) Complete(ctx context.Context, c store.Completion) error {
	start := time.Now()
	err := t.s.Complete(ctx, c)
	t.observe("complete", start, err)
	return err
}

func (t *timed) Release(ctx context.Context, f store.Fence) error {
	start := time.Now()
	err := t.s.Release(ctx, f)
	t.observe("release", start, err)
	return err
}

func (t *timed) Cleanup(ctx context.Context, limit int) (int, error) {
	start := time.Now()
	n, err := t.s.Cleanup(ctx, limit)
	t.observe("cleanup", start, err)
	return n, err
}

func (t *timed) Close() error { return t.s.Close() }
