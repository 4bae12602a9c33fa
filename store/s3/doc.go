// Package s3store keeps idem's idempotency records in an S3 bucket (DSN
// s3://bucket/prefix?endpoint=...), on AWS S3 or on any S3-compatible
// server that honours conditional writes: no server of one's own beside the
// object store, records next to the data they protect.
//
// The package lives at store/s3 but is named s3store, so that it can be
// imported next to the SDK's s3 package without renaming either:
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	client := s3.NewFromConfig(cfg)
//	st, err := s3store.New(client, s3store.Options{Bucket: "task-queue"})
//	eng := idem.New(st, idem.Policy{TTL: 30 * 24 * time.Hour, CleanupInterval: -1})
//
// For an S3-compatible server, give the client a BaseEndpoint and
// UsePathStyle (ParseDSN and Config.ClientOptions do this from a DSN). The
// credentials need s3:GetObject, s3:PutObject, s3:DeleteObject and
// s3:ListBucket on the bucket. Each record is one JSON object,
// <Prefix>idempotency/<scope>/<key hash>.json; the raw key is a field of it,
// never part of its name.
//
// Every transition is one conditional request, so any number of processes
// sharing the bucket keep the guarantee without a lock: Reserve is PutObject
// with If-None-Match: *, and Renew, Complete, Release and takeovers write or
// delete with If-Match on the ETag of the version they read and checked; a
// 412 means read again and decide again. This needs strong read-after-write
// consistency and atomic conditional PutObject (AWS since 2024, versitygw,
// MinIO): a server that ignores If-None-Match runs keys twice, and
// TestServerSemantics shows what to check. Deletes are weaker on some
// servers, so in a narrow race a key may run once more: at least once in a
// corner, never a corrupt record.
//
// The store never compares one machine's clock with another's. Expiry is
// judged on the server's clock: a record lives its TTL from the object's
// Last-Modified, read against the Date of the answer that read it, so it
// never expires early and is replayed at most about a second late. A lease
// is judged by observe and wait: a taker counts a holder gone only after it
// has watched the same version unchanged for the holder's whole lease on
// its own monotonic clock, then takes over with If-Match on that version.
//
// S3 has no index by expiry, so Cleanup lists the whole bucket: for
// anything large, let a lifecycle rule (Store.LifecycleRule) delete records,
// set Policy.CleanupInterval to -1 and run `idem cleanup` now and then. A
// bucket has no transactions either: an operation that writes objects of
// its own names them by idem.HoldFrom(ctx).ID and creates them with
// Store.CreateOnce, so that the next holder of a key finds what a dead one
// wrote.
//
// The design in full (the object's fields, each request's conditions, what
// servers differ on, the clock rules, lifecycle rules, the tests against
// versitygw) is in docs/stores/S3.md.
package s3store
