// Package dynamodbstore keeps idem's idempotency records in a DynamoDB
// table (DSN dynamodb://TABLE?region=...&endpoint=...), on AWS or on a
// DynamoDB-compatible server such as dynalite.
//
// The package lives at store/dynamodb but is named dynamodbstore, so that
// it can be imported next to the SDK's dynamodb package:
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	client := dynamodb.NewFromConfig(cfg)
//	_, err = dynamodbstore.Migrate(ctx, client, "idem") // once: creates the table
//	st, err := dynamodbstore.New(client, dynamodbstore.Options{Table: "idem"})
//	eng := idem.New(st, idem.Policy{CleanupInterval: -1})
//
// The credentials need dynamodb:GetItem, PutItem, UpdateItem, DeleteItem
// and DescribeTable on the table (Scan for Cleanup; CreateTable,
// DescribeTimeToLive and UpdateTimeToLive for Migrate). Each record is one
// item whose hash key is the record's key hash; the raw key is an
// attribute, never part of a key.
//
// Every transition is one conditional request, so any number of processes
// sharing the table keep the guarantee: Reserve is PutItem with
// attribute_not_exists(pk), a takeover a PutItem conditional on the token
// and version it read, and Renew, Complete and Release are conditional on
// the caller's token, so a holder whose record was taken over gets
// store.ErrLeaseLost and cannot overwrite it.
//
// No lease or lifetime is judged by comparing clients' clocks. A taker
// counts a lease over only after it has watched the same version of a
// record for the whole lease on its own monotonic clock. Expiry is judged
// on the server's clock as the Date headers of its answers bound it, so a
// record never expires before its TTL has passed on the server, and
// expires at most a second or two after; a server whose answers carry no
// Date is refused.
//
// Migrate turns native TTL on (best effort: dynalite has none), and expiry
// never waits for it. Cleanup scans the whole table, as DynamoDB has no
// cheaper way to find expired items: on AWS let native TTL delete them, set
// Policy.CleanupInterval to -1 and run `idem cleanup` now and then.
//
// An item is at most 400 KB. A value that does not fit is recorded as not
// stored, so that the key never runs again: a stored HTTP response keeps
// its status and headers and a retry gets 409 response_not_stored; any
// other value is recorded empty. Values up to MaxValueBytes are always stored
// whole.
//
// The design in full (the attributes, each request's conditions, the bounds
// on the server's clock, cleanup, values past the item limit, the tests
// against dynalite) is in docs/stores/DYNAMODB.md.
package dynamodbstore
