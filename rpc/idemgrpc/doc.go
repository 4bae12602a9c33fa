// Package idemgrpc makes retries of unary gRPC calls safe (grpc-go): a
// server interceptor runs each call with an idempotency key at most once
// per caller and key, and answers every retry with the first call's
// outcome; a client interceptor gives each call one key and calls again
// with it when an answer was lost.
//
//	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(eng, idemgrpc.ServerOptions{})))
//	cc, err := grpc.NewClient(addr, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{})), ...)
//
// It is a module of its own (github.com/idem-dev/idem/rpc, with
// idemconnect), so that users of idem's other packages never depend on
// grpc-go or Connect.
//
// # The server
//
// The key is the request metadata "idempotency-key" (the Idempotency-Key
// header in lower case, as metadata keys are), read by the rules of the
// HTTP header: one value, a Structured Field string or the bare text,
// validated as idem.ValidateKey does. A call without one passes through
// unprotected unless ServerOptions.RequireKey is set. Keys are scoped by
// the caller, by the HTTP middleware's own rule (idemhttp.CredentialTenant,
// given the metadata as an http.Header and the connection's TLS state): a
// hash of every credential the call carries (authorization, cookie, the
// API-key headers, the TLS client certificate), compared exactly; a keyed
// call without any is refused. The
// request's fingerprint is the method's full name and the request
// message's deterministic protobuf encoding, so the same key with another
// message is refused; the method is the key's binding, so the same key on
// another method is refused too.
//
// The handler runs once through idem.Engine.Do. Its outcome is recorded,
// the response message (its type name and bytes) or its status with the
// details, and every call with the key gets it back, with the response
// metadata "idempotent-replayed: true". The first answer and replays carry
// "idempotency-key-expires" (an HTTP-date): until then a retry with the
// key gets this outcome. A handler error is a failure that the engine's
// Policy.OnFailure decides about (released by default, so a retry runs
// again; OnFailureCache replays it); Unavailable and ResourceExhausted, the
// codes gRPC documents as "nothing happened, retry", always release the
// key. Response headers and trailers that the handler sets itself are
// not recorded.
//
// idem's own answers (docs/problems.md's kinds) are statuses with a
// google.rpc.ErrorInfo (domain "idem.dev", reason the kind in capitals,
// metadata conflict_type, idempotency_key and key_expires_at) and, when a
// retry can succeed, a google.rpc.RetryInfo:
//
//	kind                    code                when
//	in_progress             Aborted + RetryInfo the first call with the key still runs; retry with the key after the delay
//	payload_mismatch        FailedPrecondition  the key was used with another request message
//	key_reused              FailedPrecondition  the key was used on another method
//	previous_failure        FailedPrecondition  the first call failed and the policy is OnFailureConflict
//	outcome_unknown         FailedPrecondition  the first call stopped without an outcome (a panic): it may have run
//	response_not_stored     FailedPrecondition  the recorded outcome cannot be read here (an unknown message type)
//	missing_key             InvalidArgument     RequireKey and no key
//	invalid_key             InvalidArgument     the key is malformed or too long
//	multiple_keys           InvalidArgument     more than one idempotency-key
//	tenant_required         Unauthenticated     a keyed call without credentials
//	unsupported_message     Unimplemented       the server's codec is not protobuf: no fingerprint, so not run
//	store_unavailable       Unavailable + RetryInfo  the store cannot be reached; nothing ran
//	outcome_not_recorded    Unavailable + RetryInfo  the call ran, its outcome could not be recorded; retry with the key
//
// Aborted is gRPC's code for a concurrency conflict to retry.
// FailedPrecondition says "do not retry until the state is fixed", which a
// key bound to another call is: a new call needs a new key, and the old
// one may have run. AlreadyExists is left to the API's own entities, so
// that an application's "already exists" is not mistaken for idem's. The
// in_progress answer also carries the trailer grpc-retry-pushback-ms,
// which grpc-go's retry policy obeys.
//
// # The client
//
// UnaryClientInterceptor puts a key in each call's metadata (WithKey
// chooses it: one per user intent) and calls again with it, up to
// ClientOptions.MaxAttempts, on Unavailable (a lost connection, or a lost
// answer), ResourceExhausted, and idem's in_progress (after RetryInfo's
// delay), store_unavailable and outcome_not_recorded: the rule of idem's
// HTTP clients (docs/problems.md, "How a client retries") read for gRPC.
// grpc-go's own retry policy (service config) works inside each attempt:
// it resends the same metadata, hence the same key. To leave all retries
// to it, set MaxAttempts to 1 and list UNAVAILABLE and ABORTED in its
// retryableStatusCodes.
//
// # Streaming
//
// Streaming calls pass through untouched: there is no stream interceptor.
// A stream has no single request message to fingerprint nor a single
// response to replay; make each message of a stream idempotent on its own
// (idem.Engine.Do with a key per message), or use unary calls for
// operations that must run once.
package idemgrpc
