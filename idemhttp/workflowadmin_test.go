package idemhttp_test

// The workflow admin: idempotent cancel_workflow, resume_workflow and
// fork_workflow, replayed against the workflow-admin profile on a small
// example API.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
)

// workflowAdmin is a tiny workflow admin API: cancel a running workflow,
// resume a cancelled one (anything else fails), fork any workflow.
func workflowAdmin(block <-chan struct{}) func(s *server, mux *http.ServeMux) {
	return func(s *server, mux *http.ServeMux) {
		var mu sync.Mutex
		status := map[string]string{"wf-1": "running", "wf-2": "running"}
		forks := 0
		reply := func(w http.ResponseWriter, code int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(v)
		}
		mux.HandleFunc("POST /workflows/{id}/cancel", s.counting(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("block") != "" {
				<-block
			}
			mu.Lock()
			defer mu.Unlock()
			id := r.PathValue("id")
			status[id] = "cancelled"
			reply(w, 200, map[string]string{"workflow_id": id, "status": "cancelled"})
		}))
		mux.HandleFunc("POST /workflows/{id}/resume", s.counting(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			id := r.PathValue("id")
			if status[id] != "cancelled" {
				reply(w, 422, map[string]string{"error": "workflow_not_cancelled", "workflow_id": id})
				return
			}
			status[id] = "running"
			reply(w, 200, map[string]string{"workflow_id": id, "status": "running"})
		}))
		mux.HandleFunc("POST /workflows/{id}/fork", s.counting(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			forks++
			reply(w, 201, map[string]any{"workflow_id": fmt.Sprintf("%s-fork-%d", r.PathValue("id"), forks), "forked_from": r.PathValue("id")})
		}))
		mux.HandleFunc("GET /health", s.counting(func(w http.ResponseWriter, r *http.Request) {
			reply(w, 200, map[string]string{"status": "ok"})
		}))
	}
}

func adminServer(t *testing.T, block <-chan struct{}) *server {
	return newServer(t, idemhttp.Options{
		Profile: idemhttp.WorkflowAdmin(),
		Tenant:  idemhttp.TenantHeader("X-Admin"),
		Routes: []idemhttp.Route{
			{Pattern: "POST /workflows/{id}/cancel", Key: idemhttp.KeyRequired},
			{Pattern: "POST /workflows/{id}/resume", Key: idemhttp.KeyRequired},
			{Pattern: "POST /workflows/{id}/fork", Key: idemhttp.KeyRequired},
		},
	}, workflowAdmin(block))
}

func (s *server) admin(action, wf, key string) *response {
	return s.do("POST", "/workflows/"+wf+"/"+action, `{}`, "Idempotency-Key", key, "X-Admin", "ops")
}

func TestWorkflowAdminKeyValidation(t *testing.T) {
	t.Parallel()
	s := adminServer(t, nil)
	for _, key := range []string{"", "   ", strings.Repeat("k", 201)} {
		r := s.admin("cancel", "wf-1", key)
		problem(t, r, 400, idemhttp.KindInvalidKey)
	}
	problem(t, s.do("POST", "/workflows/wf-1/cancel", `{}`, "X-Admin", "ops"), 400, idemhttp.KindMissingKey)
	if r := s.admin("cancel", "wf-1", "  "+strings.Repeat("k", 200)+"  "); r.Status != 200 {
		t.Fatalf("200 bytes after trim: %d %s", r.Status, r.Body)
	}
}

func TestWorkflowAdminReplayFlag(t *testing.T) {
	t.Parallel()
	s := adminServer(t, nil)
	first := s.admin("fork", "wf-1", "fork-1")
	if first.Status != 201 {
		t.Fatalf("%d %s", first.Status, first.Body)
	}
	f := first.json(t)
	if f["idempotency_replayed"] != false || f["workflow_id"] != "wf-1-fork-1" {
		t.Fatalf("first body %s", first.Body)
	}
	again := s.admin("fork", "wf-1", "fork-1")
	a := again.json(t)
	if again.Status != 201 || a["idempotency_replayed"] != true || a["workflow_id"] != "wf-1-fork-1" {
		t.Fatalf("replay body %s", again.Body)
	}
	firstAndReplayTellExpiry(t, first, again)
	if n := s.count("POST", "/workflows/wf-1/fork", "fork-1"); n != 1 {
		t.Fatalf("forked %d times", n)
	}
}

func TestWorkflowAdminInProgressConflict(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	s := adminServer(t, block)
	done := make(chan *response)
	go func() {
		done <- s.do("POST", "/workflows/wf-1/cancel?block=1", `{}`, "Idempotency-Key", "c-1", "X-Admin", "ops")
	}()
	deadline := time.Now().Add(5 * time.Second)
	for s.store.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	r := s.do("POST", "/workflows/wf-1/cancel?block=1", `{}`, "Idempotency-Key", "c-1", "X-Admin", "ops")
	problem(t, r, 409, idemhttp.KindInProgress)
	close(block)
	if first := <-done; first.Status != 200 || first.json(t)["idempotency_replayed"] != false {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
}

func TestWorkflowAdminFailedConflictWithPreviousFailure(t *testing.T) {
	t.Parallel()
	s := adminServer(t, nil)
	first := s.admin("resume", "wf-2", "r-1") // wf-2 is running: resume fails
	if first.Status != 422 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	// Cancelling wf-2 would make a resume succeed now, but the key's first
	// call failed: 409 with the previous failure, not a second try.
	s.admin("cancel", "wf-2", "c-2")
	r := s.admin("resume", "wf-2", "r-1")
	p := problem(t, r, 409, idemhttp.KindPreviousFailure)
	prev, _ := p["previous_failure"].(map[string]any)
	body, _ := prev["body"].(map[string]any)
	if prev["status"] != float64(422) || body["error"] != "workflow_not_cancelled" {
		t.Fatalf("previous failure context: %v", p)
	}
	if n := s.count("POST", "/workflows/wf-2/resume", "r-1"); n != 1 {
		t.Fatalf("resume ran %d times", n)
	}
	// A new key is the client's way to try again.
	if r := s.admin("resume", "wf-2", "r-2"); r.Status != 200 {
		t.Fatalf("new key: %d %s", r.Status, r.Body)
	}
}

func TestWorkflowAdminKeyBoundToActionAndWorkflow(t *testing.T) {
	t.Parallel()
	s := adminServer(t, nil)
	s.admin("cancel", "wf-1", "k")
	for _, c := range []struct{ action, wf string }{{"resume", "wf-1"}, {"cancel", "wf-2"}, {"fork", "wf-2"}} {
		r := s.admin(c.action, c.wf, "k")
		p := problem(t, r, 409, idemhttp.KindKeyReused)
		if !strings.Contains(p["detail"].(string), "/workflows/wf-1/cancel") {
			t.Fatalf("detail %v", p["detail"])
		}
	}
	if s.total() != 1 {
		t.Fatalf("%d executions, want 1", s.total())
	}
}

func TestWorkflowAdminHealthIsNotIdempotencyBacked(t *testing.T) {
	t.Parallel()
	s := adminServer(t, nil)
	s.do("GET", "/health", "", "Idempotency-Key", "h")
	s.do("GET", "/health", "", "Idempotency-Key", "h")
	if n := s.count("GET", "/health", "h"); n != 2 || s.store.Len() != 0 {
		t.Fatalf("health ran %d times, %d records", n, s.store.Len())
	}
}

// TTL 7 days, cleanup by age, throttled to once per 300 s.
func TestWorkflowAdminTTLAndCleanup(t *testing.T) {
	t.Parallel()
	s := adminServer(t, nil)
	s.admin("fork", "wf-1", "f")
	s.clock.Add(7*24*time.Hour - time.Minute)
	if r := s.admin("fork", "wf-1", "f"); r.json(t)["idempotency_replayed"] != true {
		t.Fatal("expired before 7 days")
	}
	s.clock.Add(2 * time.Minute)
	eng := idem.New(s.store, idemhttp.WorkflowAdmin().Policy, idem.WithClock(s.clock.Now))
	if n, err := eng.Cleanup(context.Background(), 0, nil); err != nil || n != 1 {
		t.Fatalf("cleanup after 7 days removed %d, %v", n, err)
	}
	if r := s.admin("fork", "wf-1", "f"); r.json(t)["idempotency_replayed"] != false {
		t.Fatal("replayed after 7 days")
	}
	if p := idemhttp.WorkflowAdmin().Policy.WithDefaults(); p.CleanupInterval != 300*time.Second || p.TTL != 7*24*time.Hour {
		t.Fatalf("policy %+v", p)
	}
}
