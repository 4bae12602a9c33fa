package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/testdb"
)

// TestDynamoDBGateway: `idem migrate` creates a DynamoDB table on dynalite
// (native TTL, which dynalite lacks, a warning), then gateways on it keep
// the guarantee between them and replay each other's responses, and
// `idem cleanup --dry-run` counts over it.
//
// Not parallel: the gateways read their AWS credentials from the
// environment, which t.Setenv sets for the test binary and its children.
func TestDynamoDBGateway(t *testing.T) {
	endpoint, table := testdb.DynamoDBTable(t, "idem-e2e")
	dsn := "dynamodb://" + table + "?endpoint=" + endpoint

	out, errOut, err := runIdem(t, "migrate", "--store", dsn)
	if err != nil || !strings.Contains(out, "created the table") ||
		!strings.Contains(errOut, "warning") || !strings.Contains(errOut, "UnknownOperationException") {
		t.Fatalf("migrate: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	out, errOut, err = runIdem(t, "migrate", "--store", dsn)
	if err != nil || !strings.Contains(out, "nothing to create") {
		t.Fatalf("migrate again: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}

	// One key through one gateway, replayed by another.
	a := startAPI(t)
	g1 := startGateway(t, a.URL, "", "", "--store", dsn)
	g2 := startGateway(t, a.URL, "", "", "--store", dsn)
	first := post(t, g1.URL+"/charges", `{"amount": 4200, "currency": "eur"}`, "Idempotency-Key", "order-42")
	if first.Status != 201 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	replay := post(t, g2.URL+"/charges", `{"currency":"eur","amount":4200}`, "Idempotency-Key", "order-42")
	if replay.Status != 201 || replay.Header.Get("Idempotent-Replayed") != "true" || string(replay.Body) != string(first.Body) {
		t.Fatalf("replay through the other gateway: %d %v %s; first %s", replay.Status, replay.Header, replay.Body, first.Body)
	}
	if n := a.stats(t).Executions["order-42"]; n != 1 {
		t.Fatalf("order-42 ran %d times upstream, want once", n)
	}
	// The same key with another body is refused, not run.
	other := post(t, g2.URL+"/charges", `{"amount": 1, "currency": "eur"}`, "Idempotency-Key", "order-42")
	if other.Status != 422 || other.problem(t)["conflict_type"] != "payload_mismatch" {
		t.Fatalf("another body with the key: %d %s", other.Status, other.Body)
	}
	for _, g := range []*gw{g1, g2} {
		if err := g.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
	}

	// Three gateways, 20 keys sent 15 times each at once: each runs once.
	sharedStore(t, dsn)

	out, errOut, err = runIdem(t, "cleanup", "--store", dsn, "--dry-run")
	if err != nil || !strings.Contains(out, "0 expired records") {
		t.Errorf("cleanup --dry-run: %v %s %s", err, out, errOut)
	}
}
