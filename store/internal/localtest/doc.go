// Package localtest is the test rig that the two embedded stores,
// store/file and store/pebble, share: both keep their records in a
// directory of their own, lock it, read the wall clock once at Open, and
// must survive a kill -9 or a full disk, so the tests of that are written
// once here and run by each store with its own opener (Harness).
//
// Run runs the shared tests as subtests; Main, called from a store's
// TestMain, turns the test binary into the child process some of them
// start. The request and wait helpers (ReserveReq, Leased, Gone, Stale,
// Eventually) and the full-disk helpers (Record, FillStore, CheckReplays,
// Refusals) serve the stores' own tests too.
package localtest
