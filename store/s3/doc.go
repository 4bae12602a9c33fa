// Package s3store keeps idem's idempotency records in an S3 bucket (DSN
// s3://bucket/prefix?endpoint=...), on AWS S3 or on any S3-compatible
// server that honours conditional writes. It is the S3 task queue's design: no
// server of one's own beside the object store, records next to the data
// they protect.
//
// The package lives at store/s3 but is named s3store, so that it can be
// imported next to the SDK's s3 package without renaming either:
//
//	import (
//		"github.com/aws/aws-sdk-go-v2/config"
//		"github.com/aws/aws-sdk-go-v2/service/s3"
//		s3store "github.com/idem-dev/idem/store/s3"
//	)
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	client := s3.NewFromConfig(cfg)
//	st, err := s3store.New(client, s3store.Options{Bucket: "task-queue"})
//	eng := idem.New(st, idem.Policy{TTL: 30 * 24 * time.Hour, CleanupInterval: -1})
//
// For an S3-compatible server, point the client at it with path-style
// addressing (ParseDSN and Config.ClientOptions do this from a DSN):
//
//	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
//		o.BaseEndpoint = aws.String("http://127.0.0.1:7070")
//		o.UsePathStyle = true
//	})
//
// The credentials need s3:GetObject, s3:PutObject, s3:DeleteObject and
// s3:ListBucket on the bucket (AWS requires s3:GetObject too for a delete
// with If-Match).
//
// # Layout
//
// One JSON object per record, as in the S3 task queue:
//
//	<Prefix>idempotency/<scope>/<key_hash>.json
//
// where key_hash is store.HashKey(scope, key), the hex SHA-256 of
// scope + ":" + key, which the engine computes; the raw key is a field of
// the object, never part of its name. The scope is escaped by ScopeSegment:
// letters, digits, '-', '_' and '.' stay as they are (so the seed's task
// types read as written: idempotency/charge_customer/...), everything else
// is percent-encoded, '/' included, so that a scope is always exactly one
// folder; the empty scope is "~", and a scope whose escaped form exceeds
// 200 bytes becomes "~" + its SHA-256, since servers that map keys to files
// cap a path segment at 255 bytes. The escaping is reversible, so two
// scopes never share a folder; the folder only groups, the key hash alone
// identifies.
//
// The object (the fields of the S3 task queue's example, with the engine's names
// where the seed has none):
//
//	{
//	  "version": 1,
//	  "key": "charge-ORD-123",
//	  "key_hash": "sha256:9c1d…",
//	  "scope": "charge_customer",
//	  "state": "succeeded",                  // in_progress | succeeded | failed
//	  "token": "6118592847593245113",         // fencing token, a decimal string
//	  "input_hash": "sha256:…",               // the request's fingerprint
//	  "binding": "charge_customer",           // omitted when empty
//	  "value": "eyJ0YXNrX2lkIjoi…",           // the outcome, base64; omitted when empty
//	  "request_id": "req_…",                  // omitted when empty
//	  "created_at": "2026-01-27T12:00:00Z",
//	  "updated_at": "2026-01-27T12:00:00Z",
//	  "expires_at": "2026-02-26T12:00:00Z",
//	  "lease_until": "2026-01-27T12:01:00Z",
//	  "ttl": "720h0m0s",                      // the lifetime, from the write (see Clocks)
//	  "ttl_from": "2026-01-27T12:00:00Z",     // renewals only: where the ttl counts from
//	  "lease": "1m0s",                        // in_progress only: the holder's lease
//	  "renewal": 2                            // in_progress only: renewals so far
//	}
//
// The token is a string because JSON numbers are doubles to most readers;
// durations are Go duration strings. The four times are for people to
// read, on the server's clock as the writer estimated it (the Date of the
// last answer it got, plus the time since); the store judges by ttl,
// ttl_from and lease against the server's own answers (see Clocks). The
// ttl (and ttl_from) are repeated in the object's metadata
// (x-amz-meta-idem-ttl, -idem-ttl-from) for Cleanup, and expires_at as
// before (x-amz-meta-idem-expires-at). The S3 task queue's two-phase status
// maps onto the states: creating is in_progress, ready is succeeded.
//
// # Atomicity
//
// Every transition is one conditional request, so any number of processes
// (and machines) sharing the bucket keep the guarantee; the store holds no
// lock and the processes never talk to each other:
//
//   - Reserve is PutObject with If-None-Match: * (the S3 task queue's create). Of
//     concurrent creators the server lets exactly one write. The others get
//     412, GET the object and report it; if it has expired, or is stale and
//     the request may take it over with the same fingerprint and binding,
//     they replace it with If-Match: <the ETag they read>, which again only
//     one of them can do; the others re-read. Expired and stale are judged
//     as Clocks says.
//   - Renew and Complete GET the record, check that it is in_progress with
//     the caller's token (else store.ErrLeaseLost), and PutObject the new
//     version with If-Match on the ETag of what they checked. A 412 means it
//     changed since: they read it again and decide again, so a holder whose
//     record was taken over gets ErrLeaseLost and cannot overwrite it. The
//     store remembers the ETag of what its process last wrote for a
//     reservation it holds, and skips the GET when it can: a completion
//     after a reservation is then two PUTs in all, the cost the seed
//     announces. That memory never fences anything; If-Match does.
//   - Release GETs and checks the record the same way, always (never from
//     memory), then calls DeleteObject with If-Match on the ETag it checked.
//   - When the SDK retries a request whose answer was lost, the retry meets
//     the object the first try wrote and gets 412; the store recognises its
//     own bytes and reports success rather than a conflict.
//
// Answers treated as "changed, read again": 412 PreconditionFailed; 404
// NoSuchKey to If-Match on an object deleted meanwhile (AWS, versitygw;
// gofakes3 says 412); and AWS's 409 ConditionalRequestConflict for two
// conditional writes at once. A call that keeps losing (more than 16 rounds)
// returns an error rather than spin.
//
// # What S3 can and cannot guarantee
//
// S3 gives strong read-after-write consistency and atomic conditional
// PutObject (AWS since 2024; versitygw and MinIO too; check any other
// server: one that ignores If-None-Match silently runs keys twice, and
// TestServerSemantics shows what to check). With those,
// Reserve, Renew and Complete are exact.
//
// Deletes are where servers differ, and a narrow race remains:
//
//   - AWS S3 honours If-Match on DeleteObject, and so does versitygw, which
//     the tests run against. versitygw, however, evaluates the condition
//     and removes the file without the lock its conditional PUTs take, so a
//     takeover or re-reservation landing in the microseconds between the
//     two can be deleted.
//   - gofakes3 (and any server that ignores If-Match on DeleteObject)
//     deletes unconditionally. Release then relies on the token check of
//     the GET just before its delete: the race is a takeover of the
//     releasing holder's own record between that GET and the DELETE, which
//     needs its lease to run out within one round trip, since the engine
//     renews leases at a third of their length. Cleanup likewise relies on
//     its GET: a new reservation of an expired key between Cleanup's GET and
//     DELETE would be deleted. There is no safe fallback with plain deletes
//     (a tombstone written first only moves the window), so on such servers
//     prefer a lifecycle rule to Cleanup.
//
// A delete lost in those windows makes the key look absent, so a retry may
// run the operation once more: at-least-once in a corner, never a corrupt
// record.
//
// GET returns the body, the ETag and the Last-Modified of one version on
// S3. versitygw looks up the Last-Modified, then the ETag, then opens the
// file, so a read racing a write may pair an older Last-Modified or ETag
// with a newer body. An older ETag only makes the conditional write that
// follows fail and re-read; the lease watch names a version by its ETag and
// its body together, so such a pair is a version of its own, seen once,
// that never makes a record stale. An older Last-Modified makes a fresh
// record look older, possibly expired, so a verdict of expired is
// confirmed by a second read before the record is treated as absent or
// replaced (one more GET, for expired records only).
//
// # Clocks
//
// Replicas' clocks disagree, and S3 has no clock a client could ask for
// except as its answers carry it, so the store never compares one
// machine's clock with another's (store/doc.go, "One clock for a lease"):
//
//   - Expiry is judged on the server's clock. A record lives ttl from the
//     write that set it, whose time is the object's Last-Modified; a
//     reader compares that with the Date header of the very answer that
//     read the object (the SDK's clock-skew middleware parses it into the
//     response metadata). Record.ReadAt is that Date, and ExpiresAt,
//     UpdatedAt and CreatedAt are on the same clock. A renewal rewrites
//     the object, and so moves its Last-Modified: it names, in ttl_from,
//     the instant the reservation's ttl counts from (the Date of the
//     answer to the reservation's write, or its Last-Modified when read),
//     so that a lease never keeps a record past its lifetime.
//   - Date and Last-Modified carry whole seconds, cut (or rounded) from
//     the server's clock: a record is kept until the Date is a full second
//     past its expiry. It is replayed at most about a second past its TTL
//     (two with a TTL that is not whole seconds; a renewed reservation's
//     ttl_from may add one more) and never treated as expired before it.
//   - Leases are judged by observe and wait (store/internal/leasewatch): a
//     would-be taker notes the ETag of an in_progress object the first
//     time it reads it, on its own monotonic clock, and counts it stale
//     only once it has itself watched that ETag unchanged for the holder's
//     lease, which the object stores. Its takeover is a PutObject with
//     If-Match on that ETag: a renewal landing in between wins. Every
//     renewal writes new bytes (its count goes up), so its ETag (the MD5 of
//     the body) is new and restarts every watcher's count. Record.LeaseLeft
//     is what this client's watch says; LeaseUntil, for display, is a lease
//     after the Date of the answer that first showed it that version. The
//     engine's holder counts its lease from before it sent the write, so it
//     gives the lease up before any watcher can judge it over: skew between
//     replicas costs a delay at most, and a dead holder's key is taken over
//     between one and two leases after the taker first looks.
//
// Objects written before durations were stored (no ttl) are read and
// judged by the same rules, with durations taken from their times, which
// one writer wrote on one clock: the TTL is expires_at - updated_at, from
// the object's Last-Modified; the lease is lease_until - updated_at (longer
// than the holder's for a record it renewed: a taker waits more, never
// less), or a minute when that is not positive. The format version stays
// 1: the new fields are optional, so processes still running the code from
// before read the new objects while a deployment rolls (they judge them by
// their own clocks, as they always did).
//
// # Expiry and cleanup
//
// Readers treat an expired record as absent, whatever is still stored, and
// Reserve replaces an expired record with If-Match (the S3 task queue:
// "treated as stale and can be overwritten with CAS").
//
// S3 has no index by expiry. Cleanup lists every object under idempotency/
// (a LIST per 1,000), HEADs each one to read its TTL from the metadata and
// judge it by the HEAD's Date and Last-Modified, GETs the expired ones to
// decide, and deletes them with If-Match: its cost
// grows with all the records, live or not, unlike the store contract's other
// stores. It is fine for small buckets and tests; for anything large, let S3
// delete records by itself with a lifecycle rule on idempotency/ (the S3 task queue's
// "S3 lifecycle policy"), turn off the engine's background cleanup
// (Policy.CleanupInterval: -1) and leave Cleanup to the occasional
// `idem cleanup`. LifecycleRule builds the rule, expiring objects TTL + 1
// day after their last write:
//
//	_, err = client.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{
//		Bucket: aws.String("task-queue"),
//		LifecycleConfiguration: &types.BucketLifecycleConfiguration{
//			Rules: append(existingRules, st.LifecycleRule(30*24*time.Hour)),
//		},
//	})
//
// or, as JSON for `aws s3api put-bucket-lifecycle-configuration`:
//
//	{"Rules": [{"ID": "idem:idempotency/", "Status": "Enabled",
//	  "Filter": {"Prefix": "idempotency/"},
//	  "Expiration": {"Days": 31},
//	  "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}]}
//
// Every conditional rewrite of a record leaves a noncurrent version behind
// in a versioned bucket; prefer an unversioned bucket, or keep the rule's
// noncurrent expiration.
//
// # The operation's own writes
//
// A bucket has no transactions: an operation cannot commit its own writes
// together with its record's completion. A submitter of the S3 task queue
// that dies after writing its task but before completing its record leaves
// a record that the next submitter takes over once the lease runs out; if
// that one made a new task, the key would have two. So the operation names
// its writes by its record's stable ID, idem.HoldFrom(ctx).ID (the same for
// every holder of the key, computable beforehand with idem.RecordID), and
// creates them with CreateOnce (If-None-Match: *): the next holder finds the
// task the dead one wrote and returns it. A write left from an earlier use
// of the key, whose record expired, is told apart by CreateOnce's replace
// function (the task carries its own expiry) and overwritten with If-Match.
//
// # Testing
//
// The tests run the conformance suite, the S3 task queue's examples and fault
// injection against versitygw, a real S3 gateway over a directory:
// scripts/s3-server.sh install builds it (once, about 2 minutes), and the
// tests start and stop it themselves; IDEM_TEST_S3=http://KEY:SECRET@host:port
// points them at another server instead. The suite also runs against
// gofakes3 in process.
package s3store
