// Package inspect renders an idempotency record as JSON for people: the
// `idem inspect` command and the admin listener's /keys endpoint. Values
// that hold an HTTP response stored by idemhttp are decoded into status,
// headers and body; other values are shown as text when they are UTF-8 and
// as base64 otherwise.
package inspect
