// Package idemconnect makes retries of unary Connect calls
// (connectrpc.com/connect) safe: NewServerInterceptor runs each call with
// an Idempotency-Key header at most once per caller and key, and answers
// every retry with the first call's outcome; NewClientInterceptor gives
// each call one key and sends it again with it when an answer was lost.
//
//	mux.Handle(pingv1connect.NewPingServiceHandler(svc, connect.WithInterceptors(idemconnect.NewServerInterceptor(eng, idemconnect.ServerOptions{}))))
//	client := pingv1connect.NewPingServiceClient(http.DefaultClient, url, connect.WithInterceptors(idemconnect.NewClientInterceptor(idemconnect.ClientOptions{})))
//
// It behaves as idemgrpc does, in all of Connect's protocols (Connect,
// gRPC and gRPC-Web; HTTP/1.1 and HTTP/2): the key, the caller's scope,
// the fingerprint, the recorded outcome (the response message, or the
// error with its details) and the codes and google.rpc details of idem's
// own answers are the same, so a grpc-go client and a Connect client
// calling one procedure with one key on one engine get one outcome (see
// idemgrpc's documentation for the table of codes). The Idempotency-Key
// header is the gRPC metadata "idempotency-key". The first answer and
// replays carry Idempotency-Key-Expires, replays Idempotent-Replayed:
// true, in the response headers, and idem's own errors carry the expiry
// in their metadata.
//
// A replayed message is built from its descriptor (dynamicpb), since the
// interceptor does not know the handler's response type: Connect's
// handlers send any message their codec encodes, and the client decodes it
// into its own type as usual.
//
// The client interceptor also sends again a call whose error the server
// did not send (connect.IsWireError is false: a lost connection, an
// answer cut off), which Connect reports as Unavailable, Internal or
// Unknown: with the key, sending it again is safe.
//
// Streaming calls pass through untouched, as in idemgrpc.
package idemconnect
