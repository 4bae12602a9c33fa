// Package docs holds the tests that keep the documents in this folder true
// to the code, so that they cannot drift from it unnoticed:
//
//	tree_test.go      ARCHITECTURE.md's tree table names every Go package of the
//	                  repository (every module), and each import it claims exists
//	comments_test.go  no Go comment outside tests carries a measured figure (a
//	                  duration per call, a rate, a ratio): those belong in bench/
//
// It has no Go API; the tests are the point.
package docs
