// Package periodic holds items that each fall due one fixed period after
// they were added, with one timer for all of them: the engine's lease
// renewals (a period of a third of the lease).
//
// With one period for every item, the order items are added in is also
// the order they fall due: a list held in that order needs adding at the
// tail and unlinking anywhere, both O(1) under one lock, and the timer is
// armed for the head. Most items are removed long before they are due;
// for them an item costs a link and an unlink, where a timer per item cost
// allocations and the timer heap's locking on every call.
package periodic
