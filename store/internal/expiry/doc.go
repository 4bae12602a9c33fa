// Package expiry is the index of records by expiry time that the stores
// keeping their records in memory (the memory store, the embedded store)
// clean up from: keys in buckets of one second, taken when due.
//
// Adding an item is an append to its second's bucket. An ordered B-tree
// (the embedded store's first index) cost the gateway 5 µs a request
// under the benchmark harness's load in its insert and delete, and a heap
// (the memory store's) a sift through every live record's entry; neither
// is needed, since cleanup wants only "everything due now", not an order
// within a second.
//
// Cleanup does want that order within the current second when records
// live less than a second or two (the middleware's benchmark keeps them
// 250 ms and cleans up every 25 ms): sorting the second's bucket on each
// cleanup cost 0.54 µs of CPU per first execution there. A bucket
// therefore stays sorted as items arrive, moving an item back the few
// hundred places a writer delayed by the store's lock puts it out of
// order, and a new bucket starts with room for as many items as the one
// before it received, instead of growing by copies (0.42 to 0.13 µs per
// first execution for adding, in the same profile).
package expiry
