package routers

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/idemhttp"
)

// options are the middleware's options for the orders API: a route
// written as the sub-router sees it, the caller known by X-User-ID.
func options(routePath func(*http.Request) string) idemhttp.Options {
	return idemhttp.Options{
		Tenant:    idemhttp.TenantHeader("X-User-ID"),
		Routes:    []idemhttp.Route{{Pattern: "POST /orders", Key: idemhttp.KeyRequired}},
		RoutePath: routePath,
	}
}

// ChiRoutePath is the path chi routes on inside a sub-router (Route,
// Mount): what the middleware's routes match there. At the top level it
// is empty, and the middleware matches the request's path.
func ChiRoutePath(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePath
	}
	return ""
}

// ChiRoute serves orders at POST /api/orders, the middleware used inside
// r.Route("/api", ...).
func ChiRoute(eng *idem.Engine, orders http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Route("/api", func(r chi.Router) {
		r.Use(idemhttp.Middleware(eng, options(ChiRoutePath)))
		r.Method(http.MethodPost, "/orders", orders)
	})
	return r
}

// ChiMount serves orders at POST /api/orders from a sub-router mounted at
// /api, the middleware used by the sub-router.
func ChiMount(eng *idem.Engine, orders http.Handler) http.Handler {
	api := chi.NewRouter()
	api.Use(idemhttp.Middleware(eng, options(ChiRoutePath)))
	api.Method(http.MethodPost, "/orders", orders)
	r := chi.NewRouter()
	r.Mount("/api", api)
	return r
}

// EchoGroup serves orders at POST /api/orders from an echo Group at /api,
// the middleware adapted by echo.WrapMiddleware and told the group's
// prefix.
func EchoGroup(eng *idem.Engine, orders http.Handler) http.Handler {
	e := echo.New()
	g := e.Group("/api", echo.WrapMiddleware(idemhttp.Middleware(eng, options(idemhttp.StripPrefix("/api")))))
	g.POST("/orders", echo.WrapHandler(orders))
	return e
}
