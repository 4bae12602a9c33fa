// Package dsn opens an idem store from a DSN. It is the one place that maps
// DSN schemes to store constructors; the stores themselves are constructed
// explicitly and know nothing of DSNs. What it knows of each kind (its
// schemes, idem_ parameters, example, help line and opener) is one entry
// of the table in schemes.go, which the parser, its errors, Usage
// (idem --help) and Open read.
//
//	memory:                          in-process, lost at exit (tests, demos)
//	file:PATH                        the embedded on-disk store (the default)
//	pebble:PATH                      the embedded store on Pebble
//	postgres://user@host/db?...      PostgreSQL (also postgresql://)
//	redis://host:6379/0              Redis (also rediss://)
//	redis-cluster://host:7000?addr=host:7001&addr=host:7002
//	                                 a Redis Cluster: any node, more seeds as addr=
//	                                 (also rediss-cluster://)
//	s3://bucket/prefix?endpoint=URL  S3 or a compatible server with conditional writes
//	dynamodb://TABLE?region=R        DynamoDB (endpoint=URL for dynalite); see ParseDynamoDB
//
// Store options ride on the DSN as query parameters prefixed idem_, which
// are removed before the rest reaches the driver:
//
//	postgres://...?idem_schema=idem&idem_table=records   schema and table
//	redis://...?idem_prefix=myapp:                       key name prefix (redis-cluster:// too)
//	redis://...?idem_connections=1&idem_flush_delay=100us  pipelining (see openRedis)
//	postgres://...?idem_sync_replicas=1&idem_sync_timeout=2s  every write waits for 1 replica
//	                                 (redis:// and redis-cluster:// too; docs/stores/FAILOVER.md)
//
// Open reads how a PostgreSQL or Redis store's server replicates
// (Opened.Replication) and refuses an idem_sync_replicas it cannot satisfy.
//
// PostgreSQL's pool takes pgx's own pool_max_conns parameter.
//
// Parsing is strict: a form the parser does not know is refused with the
// form it wants (ErrMalformed, ErrUnknownScheme), never handed to a driver
// that would read it as something else. redis:HOST:PORT without the //
// (which the Redis client reads as localhost:6379), a URL without a host,
// a # that would cut a password short, a parameter the Redis client
// ignores, or a ~ that no shell expands are all refused.
package dsn
