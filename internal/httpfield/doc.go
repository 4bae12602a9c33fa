// Package httpfield parses and makes the values of the HTTP fields that
// both the idemhttp middleware and the gateway in front of it read: the
// Idempotency-Key field and request IDs. It lives apart so that the two
// read them alike without the middleware exporting its parsing.
package httpfield
