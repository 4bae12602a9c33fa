package s3store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-dev/idem/store"
)

// The store's errors are logged (the gateway logs them at Error), so they
// name an object by its record's key hash, never by its object key, which
// holds the scope: the caller's tenant, as it is in a store without a
// secret (docs/ISOLATION.md).
func TestErrorsOmitScope(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	const scope = "tenant-raw-scope"
	keyHash := store.HashKey(scope, "k")
	check := func(what string, err error, want error) {
		t.Helper()
		if err == nil || (want != nil && !errors.Is(err, want)) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
		if strings.Contains(err.Error(), scope) || !strings.Contains(err.Error(), keyHash) {
			t.Errorf("%s: %q: want the key hash %s, not the scope", what, err, keyHash)
		}
	}
	ctx := context.Background()
	s := newStore(t, srv, nil)
	fence := store.Fence{Scope: scope, KeyHash: keyHash, Token: 7}
	check("complete without a record", s.Complete(ctx, store.Completion{Fence: fence, State: store.Succeeded, TTL: time.Hour}), store.ErrLeaseLost)
	check("release without a record", s.Release(ctx, fence), store.ErrLeaseLost)

	// A server that does not answer: the SDK's error quotes the URL.
	dead := newStore(t, srv, srv.client(func(o *s3.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:1")
		o.RetryMaxAttempts = 1
	}))
	_, err := dead.Get(ctx, scope, keyHash)
	check("get from a dead server", err, nil)
}
