// Package packed holds a store.Record in the few words that a store
// keeping every live record in memory (the memory store, the embedded
// store's index) wants the garbage collector to scan.
//
// A store.Record is eight strings and four times: fourteen pointer words
// and up to eight objects, and a store with a TTL of a day keeps every one
// of them alive, so each garbage collection cycle marks them all. A packed
// record keeps its strings in one, its times as integers: two pointer
// words and one object. In-process programs pay for that scan on every
// request; packing the memory store's records cut BenchmarkMiddleware's
// CPU for first executions (docs/bench/STORE-DESIGN.md).
package packed
