// Package idemwire holds the names on the wire that idem's servers and
// clients share: the request header that carries the key, the response
// headers a client reads, the gRPC metadata key, and which HTTP methods
// need no key. It imports the standard library only, so that a client
// (idemclient, a mobile or CLI program) can agree with the server without
// importing the server's middleware, its engine or their telemetry.
package idemwire
