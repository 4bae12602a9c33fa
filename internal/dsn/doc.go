// Package dsn opens an idem store from a DSN. It is the one place that maps
// DSN schemes to store constructors; the stores themselves are constructed
// explicitly and know nothing of DSNs.
//
//	memory:                          in-process, lost at exit (tests, demos)
//	file:PATH                        the embedded on-disk store (the default)
//	postgres://user@host/db?...      PostgreSQL (also postgresql://)
//	redis://host:6379/0              Redis (also rediss://)
//
// Store options ride on the DSN as query parameters prefixed idem_, which
// are removed before the rest reaches the driver:
//
//	postgres://...?idem_schema=idem&idem_table=records   schema and table
//	redis://...?idem_prefix=myapp:                       key name prefix
//
// PostgreSQL's pool takes pgx's own pool_max_conns parameter.
package dsn
