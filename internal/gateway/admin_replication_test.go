package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store/memory"
	"github.com/idem-dev/idem/store/replication"
)

// TestAdminStatsReplication: /api/stats carries how the store replicates
// and what a failover would do, for the admin page; nothing for a store
// with no replicas to tell of.
func TestAdminStatsReplication(t *testing.T) {
	t.Parallel()
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	get := func(st *replication.Status) Stats {
		t.Helper()
		srv := httptest.NewServer(Admin(AdminOptions{Store: s, Token: "tok", Logger: quiet, Replication: st}))
		defer srv.Close()
		req, _ := http.NewRequest("GET", srv.URL+"/api/stats", nil)
		req.Header.Set("Authorization", "Bearer tok")
		res, body := testkit.Send(t, req)
		var out Stats
		if err := json.Unmarshal(body, &out); res.StatusCode != 200 || err != nil {
			t.Fatalf("/api/stats = %d %s %v", res.StatusCode, body, err)
		}
		return out
	}
	if got := get(nil); got.Replication != nil {
		t.Errorf("a store without replicas to tell of: replication %+v", got.Replication)
	}
	got := get(&replication.Status{Mode: replication.Async, Replicas: 2})
	if r := got.Replication; r == nil || r.Mode != "async" || r.Replicas != 2 || !r.Warn || !strings.Contains(r.Promise, "idem_sync_replicas") {
		t.Errorf("asynchronous replicas: replication %+v", r)
	}
	if _, ok := got.Totals["records_lost"]; !ok {
		t.Errorf("totals %v lack records_lost", got.Totals)
	}
}
