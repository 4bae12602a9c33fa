// Package inproc builds the in-process contenders' handlers: idem's
// middleware (idemhttp) and the same-stack reference (refmw), each around
// the harness's operation (app). cmd/idemmw and cmd/refmw serve them over
// HTTP; BenchmarkCall in this package calls them directly, so that the
// harness can compare them call by call, CPU and allocations, with no
// network in between.
package inproc

import (
	"io"
	"log/slog"
	"net/http"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/bench/internal/app"
	"github.com/idem-dev/idem/bench/internal/refmw"
	"github.com/idem-dev/idem/idemhttp"
	"github.com/idem-dev/idem/store"
)

// Idem returns the operation behind idem's middleware with the default
// (IETF) profile on st; lean leaves out what gofiber's middleware does not
// do either (the request fingerprint, the callers' tenants, the body's
// read deadline). close closes the engine, not st.
func Idem(st store.Store, c *app.Counter, lean bool) (h http.Handler, close func()) {
	// Replays and conflicts are logged at Info; a benchmark would measure
	// the logger instead of idem.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng := idem.New(st, idem.Policy{}, idem.WithLogger(quiet))
	opts := idemhttp.Options{
		Routes: []idemhttp.Route{{Pattern: "POST " + app.PathOperation}},
		Logger: quiet,
	}
	if lean {
		opts.Routes[0].Fingerprint = idemhttp.FingerprintNone
		opts.Tenant = idemhttp.TenantNone
		opts.BodyReadTimeout = -1
	}
	return idemhttp.Middleware(eng, opts)(app.Handler(c)), func() { eng.Close() }
}

// Ref returns the operation behind the same-stack reference middleware.
func Ref(c *app.Counter) http.Handler {
	return new(refmw.Middleware).Wrap(app.Handler(c))
}
