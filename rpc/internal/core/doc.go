// Package core is what the gRPC and Connect interceptors share: reading the
// key from metadata, the caller's scope, the request's fingerprint, the
// stored outcome's encoding, and the mapping of idem's answers to status
// codes and google.rpc error details, so that a gRPC and a Connect client
// calling one procedure with one key get one outcome.
package core
