package idemhttp

import "github.com/idem-dev/idem/idemwire"

// HeaderName is the request header that carries the key (IETF draft
// "The Idempotency-Key HTTP Header Field", and Stripe).
const HeaderName = idemwire.HeaderName

// ExpiresHeader is the response header that tells a client until when the
// server retains its key: set on the first answer once its outcome is
// recorded, on replays and on every answer about an existing record (409 in_progress, outcome_unknown, previous_failure,
// response_not_stored; 422 payload_mismatch, key_reused), as an HTTP-date
// (IMF-fixdate). Until then a retry with the key gets the key's outcome
// (or the same conflict); after it the key is forgotten, and a retry would
// run the operation again, so a client stops retrying it then.
const ExpiresHeader = idemwire.ExpiresHeader
