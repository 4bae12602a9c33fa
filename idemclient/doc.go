// Package idemclient is the client side of idem: an http.RoundTripper that
// gives every mutating request an Idempotency-Key, retries it safely with the
// same key, and can keep a durable outbox of requests whose outcome it never
// saw, to send again after a crash or when the network returns (the mobile
// app's client practices).
//
//	client := &http.Client{Transport: &idemclient.Transport{Outbox: outbox}}
//
// A key is chosen per user intent, not per attempt: the transport makes one
// (a UUID) when the request has none and reuses it for every retry, so the
// server runs the operation once and replays its response to the retries.
// Requests are stored in the outbox before they are sent ("store keys
// before request") and removed once they have an outcome.
//
// The transport returns a response only when it is the request's outcome.
// Otherwise it returns an *Error carrying the key, so that the caller can
// send the same request again without running it twice:
//
//   - ErrInProgress: the first request with the key still runs (409
//     in_progress in every profile); ask again later with Error.Key.
//   - ErrConflict: the server bound the key to another request (422
//     payload_mismatch or key_reused, the mobile app's 409
//     DUPLICATE_OPERATION, previous_failure, response_not_stored,
//     outcome_unknown). The first request ran: a new key would run the
//     operation again. Treat it as a client bug, not as "retry with a new
//     key".
//   - ErrGaveUp: no answer after the last attempt; Error.MayHaveRun says
//     whether it can have reached the server.
//
// What is retried is the rule every idem client shares (docs/problems.md,
// "How a client retries"; its vectors, clients/testdata/retry.json, are
// read by this package's tests and the TypeScript client's): replays are
// final whatever their status, in_progress is waited out, conflicts stop,
// the problems that say nothing ran are retried, then 408, 429 and every
// 5xx but 501 and 505 are retried with the key.
//   - ErrKeyExpired (which matches ErrExpired): the server forgets the key
//     before another attempt could reach it. Sent again after that, the
//     request would run as new, a second time if the first ran, so the
//     transport stops and the request leaves the outbox.
//
// Servers say until when they retain a key (the Idempotency-Key-Expires
// header of first answers, replays and conflicts, or key_expires_at in a
// problem body):
// KeyExpires reads it from a response, Error.KeyExpires from the last
// answer, and the outbox keeps it with a pending request (Pending.KeyExpires)
// so that SendPending drops the request unsent once it passed. Times are on
// this client's clock: the server's Date header says how far off it is.
//
// The outbox keeps one entry per scope (the user: DefaultScope), method,
// URL and key, since servers scope keys per user and endpoint. Credentials
// (DefaultSecretHeaders(): Authorization, Cookie, ...) are not written to it:
// a token at rest in an app's files outlives its session and leaks with a
// backup. Transport.Authorize puts them back when SendPending sends the
// outbox, with the user's current token. Set SecretHeaders to an empty
// slice to store every header instead.
package idemclient
