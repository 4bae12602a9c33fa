package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store/memory"
)

// Free a key whose outcome is unknown by the request as its client sent
// it: method, path, the header its caller is known by, and its key. The
// routes find the scope, as they did for the request itself.
func ExampleRoutes_Release() {
	eng := idem.New(memory.New(memory.WithClock(exampleClock)), idem.Policy{}, idem.WithClock(exampleClock))
	defer eng.Close()
	routes, err := idemhttp.Compile(eng, idemhttp.Options{
		Tenant: idemhttp.TenantHeader("X-User-ID"),
		Routes: []idemhttp.Route{{Pattern: "POST /orders"}},
	})
	if err != nil {
		panic(err)
	}
	lost := true
	h := routes.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lost { // the payment service never answered
			lost = false
			idemhttp.ReportOutcomeUnknown(w)
			http.Error(w, "the payment service did not answer", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"order":"o-1"}`)
	}))
	post(h, "/orders", "order-1", `{}`, "X-User-ID", "alice", "X-Request-Id", "req-1")
	post(h, "/orders", "order-1", `{}`, "X-User-ID", "alice", "X-Request-Id", "req-2")

	// Someone checked: the order was never placed.
	req, _ := http.NewRequest("POST", "/orders", nil)
	req.Header.Set("X-User-ID", "alice")
	req.Header.Set("Idempotency-Key", "order-1")
	fmt.Println(routes.Release(context.Background(), req))
	post(h, "/orders", "order-1", `{}`, "X-User-ID", "alice", "X-Request-Id", "req-3")
	// Output:
	// 502 false the payment service did not answer
	// 409  {"type":"https://github.com/idem-dev/idem/blob/main/docs/problems.md#outcome_unknown","title":"The outcome of the first request with this Idempotency-Key is unknown","status":409,"detail":"the first request with this key (request ID req-1) was sent, but no complete answer came back: it may have run. This key answers 409 until it expires or an operator releases it","idempotency_key":"order-1","conflict_type":"outcome_unknown","request_id":"req-1","key_expires_at":"2025-06-02T09:30:00Z"}
	// <nil>
	// 201 false {"order":"o-1"}
}
