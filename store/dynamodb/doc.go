// Package dynamodbstore keeps idem's idempotency records in a DynamoDB
// table (DSN dynamodb://TABLE?region=...&endpoint=...), on AWS or on a
// DynamoDB-compatible server such as dynalite.
//
// The package lives at store/dynamodb but is named dynamodbstore, so that
// it can be imported next to the SDK's dynamodb package:
//
//	import (
//		"github.com/aws/aws-sdk-go-v2/config"
//		"github.com/aws/aws-sdk-go-v2/service/dynamodb"
//		dynamodbstore "github.com/idem-dev/idem/store/dynamodb"
//	)
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	client := dynamodb.NewFromConfig(cfg)
//	_, err = dynamodbstore.Migrate(ctx, client, "idem") // once: creates the table
//	st, err := dynamodbstore.New(client, dynamodbstore.Options{Table: "idem"})
//	eng := idem.New(st, idem.Policy{CleanupInterval: -1})
//
// The credentials need dynamodb:GetItem, PutItem, UpdateItem, DeleteItem
// and DescribeTable on the table (Scan for Cleanup; CreateTable,
// DescribeTimeToLive and UpdateTimeToLive for Migrate).
//
// # Layout
//
// One item per record, its hash key "pk" the record's key hash
// (store.HashKey: the hex SHA-256 of scope + ":" + key), so the raw key is
// an attribute, never part of a key. The attributes:
//
//	pk          S  key hash
//	scope, key, fp, binding, request_id   S (left out when empty)
//	state       S  in_progress | succeeded | failed
//	token       N  the fencing token (a uint64: DynamoDB numbers hold it exactly)
//	value       B  the outcome (left out when empty)
//	ver         N  the version: +1 on every write, renewals included
//	lease_ms    N  the holder's lease (in_progress only)
//	ttl_ms      N  the record's lifetime
//	created_ms, updated_ms, from_ms   N  shown: lower bounds of the first
//	               write, the last one, and the one that set ttl_ms
//	until_ms    N  judged: an upper bound of that write, plus ttl_ms
//	expires     N  for native TTL: until_ms in seconds, rounded up, plus a second
//	wid         S  a random ID of the last reservation or completion
//	not_stored  N  the length of a value too large to keep
//
// # Atomicity
//
// Every transition is one conditional request, so any number of
// processes sharing the table keep the guarantee:
//
//   - Reserve is PutItem with attribute_not_exists(pk). When an item is
//     there, the store reads it (GetItem, strongly consistent) and, if it
//     has expired, or is stale and the request may take it over with the
//     same fingerprint and binding, replaces it with PutItem conditional on
//     the token and version it read. Of racers who read the same version,
//     one writes; the others read its record.
//   - Renew and Complete are UpdateItem conditional on the token and the
//     state in_progress; Release is DeleteItem conditional on the token and
//     on the state not being succeeded. A failed condition is
//     store.ErrLeaseLost: a holder whose record was taken over cannot
//     overwrite it.
//   - When the SDK retries a write whose answer was lost, the retry fails
//     its condition; the store reads the item and recognises its own
//     write by the wid it carries, and reports success.
//
// # Leases: observe and wait
//
// DynamoDB's conditions cannot read a clock, and clients' clocks disagree,
// so no lease is judged by comparing clocks. A would-be taker notes the
// version of an in_progress record (its token and ver) the first time it
// reads it, on its own monotonic clock (store/internal/leasewatch), and
// counts the lease over only after it has itself watched that same version
// for the whole lease the record stores. A renewal bumps ver and starts
// every watcher's count again. The takeover is then a PutItem conditional
// on the token and version watched, so a renewal that lands between the
// read and the write wins. The holder counts its lease from when it sent
// the reservation or renewal and gives it up first: skew between replicas
// costs a delay at most. A dead holder's key is taken over one lease after
// a taker first looks (two after the death at most, with the look that
// starts the watch).
//
// # Expiry: on the server's clock, never early
//
// A record's lifetime is judged on the server's clock as its answers carry
// it. Every DynamoDB answer has a Date header (dynalite's too: Node's HTTP
// server sets it), the server's clock to the second. An answer dated D,
// sent at instant s and received at r of this process's monotonic clock,
// was dated between s and r, when the server's clock read between D and
// D + 1 s; so the server's clock is at least D + (t - r) and at most
// D + 1 s + (t - s) at any later instant t. The store keeps the tightest
// of these bounds over its answers (a few answers across a second's turn
// bring them within about a round trip), widens them by 0.1% of their age
// for the drift of the clocks' rates, and starts again from one answer
// when an answer contradicts them (the server's clock was stepped).
//
//   - A write stores until_ms = the upper bound of the server's clock
//     when the request is sent, plus a slack of one second for the time
//     until the server applies it, plus the TTL. If its answer arrives
//     when the upper bound has passed that (the write may have been
//     applied later: a slow network, a retry by the SDK), the store
//     re-dates the version at once (UpdateItem of until_ms, conditional
//     on that version) to the upper bound at the answer's arrival, after
//     the write. Redated counts them.
//   - A reader counts the record expired once the lower bound of the
//     server's clock when its answer arrived has reached until_ms.
//
// Neither compares this machine's clock with the writer's, so a record is
// never judged expired before its TTL has passed on the server's clock
// since it was written, whatever the clients' clocks say, as long as the
// server's Date is its clock truncated to the second. It is judged expired
// at most the width of the bounds (a second and a round trip at first,
// about a round trip later) plus the slack after. A re-dating that fails
// (the record changed meanwhile, which carries a date of its own, or the
// request failed) leaves the first date: an early expiry by at most how
// late that answer came. A server whose answers carry no Date is refused:
// the store will not judge without the server's clock.
//
// The times a record shows (CreatedAt, UpdatedAt, ExpiresAt) are the lower
// bounds, so ExpiresAt may pass a second or two before the record
// disappears; ReadAt is the lower bound when the record was read.
//
// # Native TTL and cleanup
//
// Migrate turns DynamoDB's native TTL on for the attribute "expires",
// best effort: dynalite has no UpdateTimeToLive (it answers
// UnknownOperationException), and a table may have its TTL on another
// attribute; either is a warning (MigrateReport.TTLWarning), not a failed
// migration. Expiry never relies on native TTL: AWS deletes expired items
// up to days late, and readers judge them meanwhile.
//
// Cleanup scans the table for items whose until_ms has passed and deletes
// each with a DeleteItem conditional on the token and version it read, so
// a record made again meanwhile stays. Its cost grows with the whole
// table, live items included, unlike the store contract's other stores:
// DynamoDB has no cheaper way to find expired items. An index on an
// expiry bucket would be one, but its hash key (an hour, say) takes every
// write of that hour, and a throttled index partition throttles the table
// itself; so there is none. On AWS let native TTL delete expired items for
// free and turn the engine's background cleanup off
// (Policy.CleanupInterval: -1), leaving Cleanup to an occasional
// `idem cleanup` (or to dynalite and tests).
//
// # Values past the 400 KB item
//
// An item is at most 400 KB, every attribute's name and value counted.
// A value that does not fit (over MaxItemBytes, or refused by the server
// with "Item size has exceeded the maximum allowed size") is recorded as
// not stored, so that the key is never run again:
//
//   - a stored idemhttp response (the middleware's and the gateway's
//     values) is kept with its status and kept headers, its body dropped
//     and its "not stored" flag set: a retry gets 409 response_not_stored,
//     as for a response over max_response_bytes;
//   - any other value (a library caller's own bytes, or a response sealed
//     by package seal, which the store cannot read) is recorded empty,
//     which the middleware answers with 409 response_not_stored as well
//     (saying that the stored response cannot be read, and logging it); a
//     library caller then replays an empty value, and should keep outcomes
//     that may be this large elsewhere, storing a reference.
//
// The attribute not_stored keeps the length of the value that was not
// kept. Values up to MaxValueBytes are always kept whole.
//
// # Testing
//
// The tests run the conformance suite (its process race and clock-skew
// cases included), the sealed store's suite and the cases above against
// dynalite (npm, 4.0.0): scripts/dynalite.sh start installs it into the
// cache and starts it on 127.0.0.1:8000; IDEM_TEST_DYNAMODB names another
// endpoint. Without one the tests skip, or fail under CI=true.
package dynamodbstore
