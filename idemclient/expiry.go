package idemclient

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/idem-dev/idem/idemwire"
)

// KeyExpires returns when the server forgets the key of res (a first
// answer, a replay, or an answer about the key such as 409 in_progress),
// on this client's
// clock, and false when res does not say. Servers tell it in the
// Idempotency-Key-Expires header; the time is moved by the difference
// between the server's Date header and this clock, as HTTP caches judge
// Expires (RFC 9111, section 4.2.1), so call it as the response arrives.
// It comes a second early for the rounding of both headers to the second.
//
// Until then a request sent again with the key gets the key's outcome;
// after it the server runs it as new, so the transport stops retrying a
// key before then.
func KeyExpires(res *http.Response) (time.Time, bool) {
	if res == nil {
		return time.Time{}, false
	}
	return keyExpires(res.Header, nil, time.Now())
}

// keyExpires reads the expiry an answer tells, from its header or else its
// problem body (key_expires_at, or the mobile envelope's
// error.details.keyExpiresAt), on the clock that read now when it arrived.
func keyExpires(h http.Header, body []byte, now time.Time) (time.Time, bool) {
	exp, err := http.ParseTime(h.Get(idemwire.ExpiresHeader))
	if err != nil {
		var ok bool
		if exp, ok = bodyExpiry(body); !ok {
			return time.Time{}, false
		}
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		return now.Add(exp.Sub(date) - time.Second), true
	}
	return exp.Add(-time.Second), true
}

func bodyExpiry(body []byte) (time.Time, bool) {
	if len(body) == 0 {
		return time.Time{}, false
	}
	var doc struct {
		KeyExpiresAt string `json:"key_expires_at"`
		Error        *struct {
			Details *struct {
				KeyExpiresAt string `json:"keyExpiresAt"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return time.Time{}, false
	}
	v := doc.KeyExpiresAt
	if v == "" && doc.Error != nil && doc.Error.Details != nil {
		v = doc.Error.Details.KeyExpiresAt
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// keyGone reports whether a request sent after wait would find its key
// forgotten by the server: sending it then could run the operation again.
func (t *Transport) keyGone(expires time.Time, wait time.Duration) bool {
	return !expires.IsZero() && !t.now().Add(wait).Before(expires)
}
