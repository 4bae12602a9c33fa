// Package expiry is the index of records by expiry time that the stores
// keeping their records in memory (the memory store, the embedded store)
// clean up from: keys in buckets of one second, taken when due.
//
// Adding an item is an append to its second's bucket. An ordered B-tree or
// a heap would order every live record on each insert and delete; neither
// is needed, since cleanup wants only "everything due now", not an order
// within a second.
//
// Cleanup does want that order within the current second when records
// live less than a second or two: sorting the second's bucket on each
// cleanup would be paid on every call. A bucket therefore stays sorted as
// items arrive, moving an item back the few hundred places a writer
// delayed by the store's lock puts it out of order, and a new bucket
// starts with room for as many items as the one before it received,
// instead of growing by copies. The figures behind both choices are in
// docs/bench/STORE-DESIGN.md.
package expiry
