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
package expiry
