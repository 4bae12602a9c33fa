// Package dsn opens an idem store from a DSN. It is the one place that maps
// DSN schemes to store constructors; the stores themselves are constructed
// explicitly and know nothing of DSNs.
//
//	memory:                          in-process, lost at exit (tests, demos)
//	file:PATH                        the embedded on-disk store (the default)
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
//
// PostgreSQL's pool takes pgx's own pool_max_conns parameter.
package dsn
