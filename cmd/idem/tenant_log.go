package main

import (
	"log/slog"

	"github.com/idem-dev/idem/internal/config"
)

// logTenant says at start how callers are told apart, so that an operator
// sees a shared scope before two callers share a response. It reads the
// tenant settings of this branch's config; where the config itself says
// where tenants come from (a TenantSource of its own), log that instead and
// delete this file.
func logTenant(cfg *config.Config, log *slog.Logger) {
	switch t := cfg.Tenant; {
	case t == nil:
		log.Warn("idem: tenant source: none: every caller shares one scope, so two callers that send the same key get the same response; set tenant: { header: X-User-ID } or { authorization: hash }")
	case t.Header != "":
		log.Info("idem: tenant source: header "+t.Header+"; a keyed request without it gets 401", "tenant", "header:"+t.Header)
	default:
		log.Info("idem: tenant source: a hash of the Authorization header; a keyed request without it gets 401", "tenant", "authorization:hash")
	}
}
