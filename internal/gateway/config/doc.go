// Package config reads the idem gateway's YAML configuration, applies
// IDEM_* environment overrides, validates it, and turns it into
// idemhttp.Options plus a store DSN.
//
// A minimal file:
//
//	upstream: http://127.0.0.1:3000
//
// A fuller one:
//
//	listen: 127.0.0.1:8080
//	upstream: http://127.0.0.1:3000
//	store: file:./idem-data        # "memory:" (quoted) | postgres://... | redis://... | redis-cluster://... | s3://...
//	admin_listen: 127.0.0.1:9090   # "off" disables the admin listener
//	admin_token: ...               # the admin page and API; or IDEM_ADMIN_TOKEN
//	drain_delay: 5s                # on SIGTERM, serve while /readyz says 503
//	upstream_ready: tcp            # /readyz's upstream check: tcp | /path | off
//	tenant: { header: X-User-ID }  # or { authorization: hash }, { cookie: session }, a list, none
//	anonymous: refuse              # default tenant, no credentials: 401 | shared
//	defaults: { profile: ietf, ttl: 24h, wait: 0s, cache_statuses: [2xx, 409] }
//	routes:
//	  - match: "POST /api/funnels/{slug}/assessments/{id}/answers/save"
//	    key: optional              # required | optional
//	    fingerprint: { fields: [stepId, questionId] }   # body | none
//	    profile: mobile
//
// Unknown fields are errors, so that a typo never silently falls back to a
// default, and a value of the wrong kind is named by its field in plain
// words. Route patterns that cannot mean what was written ("POST/charges",
// "post /charges", "GET /charges", a host part) are refused with the fix.
// Durations take Go's syntax plus days ("7d").
//
// Policy values are layered, from weakest to strongest: the defaults'
// profile, the defaults' own fields, the route's profile (the fields it
// sets), the route's own fields.
package config
