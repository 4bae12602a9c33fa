// Package docs holds the tests that keep the documents in this folder true
// to the code, so that they cannot drift from it unnoticed:
//
//	tree_test.go      ARCHITECTURE.md's tree table names every Go package of
//	                  every module, and each import it claims exists
//	cli_test.go       its cmd/idem row lists the commands cmd/idem runs
//	names_test.go     the files the documents name exist, and the identifiers
//	                  ARCHITECTURE.md names in a Go file occur in it
//	comments_test.go  no Go comment outside tests (and bench/) carries a
//	                  measured figure: a sub-millisecond duration, a rate,
//	                  a ratio, a percentage, a count of allocations; those
//	                  go in docs/bench/, and the comment names the file
//
// It has no Go API; the tests are the point.
package docs
