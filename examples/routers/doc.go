// Package routers shows idem's HTTP middleware under the routers Go
// services use, mounted inside a router's prefix: chi (Route and Mount)
// and echo (a Group, through echo.WrapMiddleware). Each builds an API
// whose POST /api/orders is protected by a route written as the
// sub-router sees it ("POST /orders"), the middleware told how the router
// sees the path (idemhttp.Options.RoutePath).
//
// It is a module of its own, so that idem's users never see these
// routers in their module graph.
package routers
