// Package idemclient is the client side of idem: an http.RoundTripper that
// gives every mutating request an Idempotency-Key, retries it safely with the
// same key, and can keep a durable outbox of requests whose outcome it never
// saw, to send again after a crash or when the network returns (seed 001's
// client practices).
//
//	client := &http.Client{Transport: idemclient.NewTransport(nil,
//		idemclient.WithOutbox(outbox))}
//
// A key is chosen per user intent, not per attempt: the transport makes one
// (a UUID) when the request has none and reuses it for every retry, so the
// server runs the operation once and replays its response to the retries.
// Requests are stored in the outbox before they are sent ("store keys
// before request") and removed once a final response arrives.
package idemclient
