package postgres

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// TestListenerWithoutTableAccess: PostgreSQL lets every role LISTEN on
// every channel. A role refused SELECT on the records table listens on the
// store's channel while a call with waiters (Policy.Wait) completes, with
// no secret and with one: no notification it reads holds the call's raw
// key, its scope or its outcome, in the clear or in base64.
func TestListenerWithoutTableAccess(t *testing.T) {
	t.Parallel()
	pool, peerPool := testPool(t, 4), testPool(t, 4)
	opts := freshSchema(t, pool)
	a := newTestStore(t, pool, opts)
	b := &reading{Store: newTestStore(t, peerPool, opts)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	role := uniqueName("idem_snoop")
	if _, err := pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+pgx.Identifier{role}.Sanitize())
	})
	if _, err := pool.Exec(ctx, "REVOKE ALL ON "+a.opts.qualified()+" FROM "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	snoop, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	defer snoop.Close(context.Background())
	if _, err := snoop.Exec(ctx, "SELECT count(*) FROM "+a.opts.qualified()); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("the role can read the table (err %v): the test proves nothing", err)
	}
	if _, err := snoop.Exec(ctx, "LISTEN "+pgx.Identifier{a.channel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	const scope = "test" // startCrossWake's
	for _, sealed := range []bool{false, true} {
		body := []byte("the-response-body " + uniqueName("v"))
		w := startCrossWake(t, pairOf(t, a, b, sealed), body)
		w.end(t)
		select {
		case o := <-w.got:
			if o.err != nil || !bytes.Equal(o.res.Value, body) {
				t.Fatalf("sealed %v: waiter got %q, %v", sealed, o.res.Value, o.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("sealed %v: the waiter was not woken", sealed)
		}
		// The notification of this call: the last one sent on the channel
		// once the waiter returned. Read until none is left.
		var payloads []string
		for {
			nctx, ncancel := context.WithTimeout(ctx, time.Second)
			n, err := snoop.WaitForNotification(nctx)
			ncancel()
			if err != nil {
				break
			}
			payloads = append(payloads, n.Payload)
		}
		if len(payloads) == 0 {
			t.Fatalf("sealed %v: the listener read no notification: the test proves nothing", sealed)
		}
		for _, p := range payloads {
			for _, secret := range []string{w.call.Key, string(body), scope, "req-1"} {
				if leaked(p, secret) {
					t.Errorf("sealed %v: a role without SELECT read %q from notification %.120q", sealed, secret, p)
				}
			}
		}
		t.Logf("sealed %v: %d notifications, the first %d bytes", sealed, len(payloads), len(payloads[0]))
	}
}

// leaked reports whether payload holds s, as it is or inside one of its
// space-separated fields decoded from base64.
func leaked(payload, s string) bool {
	if strings.Contains(payload, s) {
		return true
	}
	for _, f := range strings.Fields(payload) {
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.StdEncoding, base64.RawURLEncoding} {
			if b, err := enc.DecodeString(f); err == nil && bytes.Contains(b, []byte(s)) {
				return true
			}
		}
	}
	return false
}
