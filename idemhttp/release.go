package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idem-dev/idem"
)

// ErrNotCovered: no route of the middleware covers the request.
var ErrNotCovered = errors.New("idemhttp: no route covers the request")

// KeyOf returns the scope and key the middleware gives a keyed request r,
// as the client sends it (method, target, the headers its tenant comes
// from, and its Idempotency-Key): what an operator or a support tool needs
// to find the key's record (idem.Engine.Lookup) without rebuilding the
// scope by hand. It returns an error matching ErrNotCovered when no route
// covers r, idem.ErrInvalidKey when r carries no valid key, and one saying
// so when r does not identify its caller.
func (rs *Routes) KeyOf(r *http.Request) (scope, key string, err error) {
	rt := rs.m.match(r)
	if rt == nil {
		return "", "", fmt.Errorf("%w: %s %s", ErrNotCovered, r.Method, r.URL.Path)
	}
	key, p := rt.parseKey(r)
	switch {
	case p != nil:
		return "", "", fmt.Errorf("idemhttp: %s: %w", p.Detail, idem.ErrInvalidKey)
	case key == "":
		return "", "", fmt.Errorf("idemhttp: the request carries no Idempotency-Key: %w", idem.ErrInvalidKey)
	}
	tenant, ok := rs.m.tenant(r)
	if !ok {
		return "", "", errors.New("idemhttp: the request does not identify its caller (its route's tenant source is missing)")
	}
	return rt.Scope(r, tenant), key, nil
}

// Release frees the key of r as the middleware scoped it (see KeyOf), with
// its route's engine: the way out of a key whose outcome is unknown, once
// someone has checked what became of the first call. Errors are KeyOf's
// and idem.Engine.Release's.
//
//	req, _ := http.NewRequest("POST", "/orders", nil)
//	req.Header.Set("X-User-ID", "alice")        // the route's tenant source
//	req.Header.Set("Idempotency-Key", "order-1")
//	err := routes.Release(ctx, req)
func (rs *Routes) Release(ctx context.Context, r *http.Request) error {
	scope, key, err := rs.KeyOf(r)
	if err != nil {
		return err
	}
	return rs.m.match(r).eng.Release(ctx, scope, key)
}
