package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/memory"
)

// value returns the value of the metric name with exactly labels, or -1.
func value(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, mt := range f.GetMetric() {
			if len(mt.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range mt.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return mt.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func TestObserveThroughMiddleware(t *testing.T) {
	t.Parallel()
	m := New()
	eng := idem.New(m.WrapStore(memory.New()), idem.Policy{})
	t.Cleanup(func() { eng.Close() }) // waits for the cleanup the calls started
	mw, err := idemhttp.New(eng, idemhttp.Options{
		Observe: m.Observe, SharedAnonymousScope: true,
		Routes: []idemhttp.Route{{Pattern: "POST /charges"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1"}`)
	}))
	do := func(key, body string) int {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer caller-1")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, c := range []struct {
		key, body string
		want      int
	}{
		{"k1", `{"a":1}`, 201}, // executed
		{"k1", `{"a":1}`, 201}, // replayed
		{"k1", `{"a":2}`, 422}, // payload mismatch
		{"", `{"a":1}`, 201},   // pass-through
		{" ", `{"a":1}`, 400},  // invalid key
	} {
		if got := do(c.key, c.body); got != c.want {
			t.Fatalf("key %q body %s: status %d, want %d", c.key, c.body, got, c.want)
		}
	}
	route := map[string]string{"route": "POST /charges"}
	with := func(k, v string) map[string]string {
		l := map[string]string{k: v}
		for a, b := range route {
			l[a] = b
		}
		return l
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"idem_executions_total", with("code", "2xx"), 1},
		{"idem_replays_total", with("code", "2xx"), 1},
		{"idem_conflicts_total", with("conflict_type", "payload_mismatch"), 1},
		{"idem_rejections_total", with("kind", "payload_mismatch"), 1},
		{"idem_rejections_total", with("kind", "invalid_key"), 1},
		{"idem_pass_throughs_total", route, 1},
		{"idem_store_operation_duration_seconds", map[string]string{"operation": "reserve", "result": "ok"}, 3},
		{"idem_store_operation_duration_seconds", map[string]string{"operation": "complete", "result": "ok"}, 1},
	} {
		if got := value(t, m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	// The exposition has the runtime collectors too.
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"go_goroutines", "process_cpu_seconds_total", "idem_replays_total"} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestStoreResults(t *testing.T) {
	t.Parallel()
	m := New()
	s := m.WrapStore(memory.New())
	ctx := context.Background()
	if _, err := s.Get(ctx, "", "nope"); err == nil {
		t.Fatal("Get of a missing key: no error")
	}
	if err := s.Release(ctx, store.Fence{KeyHash: "nope", Token: 1}); err == nil {
		t.Fatal("Release of a missing key: no error")
	}
	s.Close()
	_, _ = s.Cleanup(ctx, 0)
	for _, c := range []struct{ op, result string }{{"get", "not_found"}, {"release", "lease_lost"}, {"cleanup", "error"}} {
		if got := value(t, m, "idem_store_operation_duration_seconds", map[string]string{"operation": c.op, "result": c.result}); got != 1 {
			t.Errorf("%s/%s = %v, want 1", c.op, c.result, got)
		}
	}
	if u, ok := s.(interface{ Unwrap() store.Store }); !ok || u.Unwrap() == nil {
		t.Error("no Unwrap")
	}
}

// TestSeriesFromTheStart: every labelled series whose label values are
// known exists at 0 before anything happened, for each configured route,
// so that Prometheus's increase() counts the first event (a series born at
// 1 shows no increase: the first unknown outcome or unprotected request
// would not alert). After the first event the series reads 1.
func TestSeriesFromTheStart(t *testing.T) {
	t.Parallel()
	routes := []string{"POST /charges", "/"}
	m := New(routes...)
	type series struct {
		name   string
		labels map[string]string
	}
	want := []series{
		{"idem_upstream_errors_total", map[string]string{"kind": "unreachable"}},
		{"idem_upstream_errors_total", map[string]string{"kind": "timeout"}},
		{"idem_upstream_errors_total", map[string]string{"kind": "error"}},
		{"idem_pass_throughs_total", map[string]string{"route": ""}},
	}
	for _, op := range []string{"reserve", "get", "renew", "complete", "release", "cleanup"} {
		for _, r := range []string{"ok", "not_found", "lease_lost", "canceled", "error"} {
			want = append(want, series{"idem_store_operation_duration_seconds", map[string]string{"operation": op, "result": r}})
		}
	}
	for _, route := range routes {
		for _, c := range []string{"1xx", "2xx", "3xx", "4xx", "5xx", "other"} {
			want = append(want,
				series{"idem_executions_total", map[string]string{"route": route, "code": c}},
				series{"idem_replays_total", map[string]string{"route": route, "code": c}})
		}
		want = append(want,
			series{"idem_unprotected_total", map[string]string{"route": route}},
			series{"idem_pass_throughs_total", map[string]string{"route": route}})
		for k := range idemhttp.DefaultStatus() {
			if k == idemhttp.KindHeadersTooLarge || k == idemhttp.KindMalformedRequest {
				continue // answered by the listener, before any route
			}
			want = append(want, series{"idem_rejections_total", map[string]string{"route": route, "kind": string(k)}})
			if k.IsConflict() {
				want = append(want, series{"idem_conflicts_total", map[string]string{"route": route, "conflict_type": string(k)}})
			}
		}
	}
	for _, s := range want {
		if got := value(t, m, s.name, s.labels); got != 0 {
			t.Errorf("%s%v = %v at the start, want 0 (-1: absent)", s.name, s.labels, got)
		}
	}
	// Nothing else: every series of idem's with labels is in the list.
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "idem_") && len(f.GetMetric()[0].GetLabel()) > 0 {
			n += len(f.GetMetric())
		}
	}
	if n != len(want) {
		t.Errorf("%d labelled series at the start, want %d", n, len(want))
	}

	// The first event moves a series from 0 to 1.
	r := httptest.NewRequest("POST", "/charges", nil)
	m.Observe(r, idemhttp.Event{Route: "POST /charges", Outcome: idemhttp.OutcomeRejected, Kind: idemhttp.KindOutcomeUnknown, Status: 409})
	m.Observe(r, idemhttp.Event{Route: "POST /charges", Outcome: idemhttp.OutcomeUnprotected, Status: 201})
	for _, s := range []series{
		{"idem_rejections_total", map[string]string{"route": "POST /charges", "kind": "outcome_unknown"}},
		{"idem_conflicts_total", map[string]string{"route": "POST /charges", "conflict_type": "outcome_unknown"}},
		{"idem_unprotected_total", map[string]string{"route": "POST /charges"}},
		{"idem_executions_total", map[string]string{"route": "POST /charges", "code": "2xx"}},
	} {
		if got := value(t, m, s.name, s.labels); got != 1 {
			t.Errorf("%s%v = %v after the first event, want 1", s.name, s.labels, got)
		}
	}
}
