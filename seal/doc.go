// Package seal keeps idempotency records unreadable at rest: with a secret,
// nothing a client sent or received can be read back from a dump of the
// store (a PostgreSQL backup, a Redis RDB file, an S3 bucket, the file
// store's directory), and no credential can be recovered from it by
// guessing.
//
// A Keyring holds one or more secrets (IDEM_SECRET in the gateway); Wrap
// puts it in front of any store:
//
//	ring, err := seal.ParseKeyring(os.Getenv("IDEM_SECRET"))
//	...
//	eng := idem.New(seal.Wrap(pgStore, ring), policy)
//
// Each secret gives, through HKDF-SHA256, an HMAC-SHA256 key and an
// AES-256-GCM key, so no key serves two purposes.
//
// # Field by field
//
// A store must still reserve atomically, compare, fence, expire and clean up
// records, so not everything can be encrypted. Each field of store.Record
// is treated as follows, and why:
//
//   - KeyHash: HMAC of the engine's key hash. It is the record's identity
//     and must be found again from the scope and key alone, so it has to be
//     deterministic; keyed, so that a known key ("order-42") cannot be
//     confirmed against a dump.
//   - Scope: HMAC of the scope. The scope holds the tenant (a user ID, an
//     organization, or the hash of an Authorization header, which an
//     unsalted dictionary attack reverses) and the endpoint. Get, the fences
//     and S3's object layout (idempotency/{scope}/{key_hash}.json) need it
//     as a stable string; an HMAC is one, and reveals nothing.
//   - Key, RequestID, and the plain Fingerprint and Binding: encrypted
//     together in one envelope, stored in the Key column (prefixed
//     "idem-sealed:"). The engine needs them back as they were (conflict
//     reports, the first request's ID on replays, `idem inspect`).
//   - Fingerprint and Binding columns: HMACs tied to the record. The store
//     itself compares them before it takes over a stale record, so they
//     must be deterministic; tied to the record's key hash, so that two
//     records of the same request body do not show it.
//   - Value (the stored response: status, replayed headers, body; or the
//     failure): encrypted.
//   - State, Token, CreatedAt, UpdatedAt, ExpiresAt, LeaseUntil: in the
//     clear. Stores decide reservations, takeovers, fencing and expiry on
//     them, and they say nothing a client sent or received.
//
// Encryption is AES-256-GCM with a random 96-bit nonce per value. Sealed
// bytes carry the ID of the key that sealed them, and the additional data
// binds them to the record's key hash and reservation token, so a sealed
// response cannot be moved to another record, or to another reservation of
// the same key, without failing to open (ErrCorrupt) rather than replaying
// someone else's answer.
//
// # Rotation
//
// The first secret of the ring (the primary) seals and indexes new records;
// every secret opens what it sealed and finds what it indexed. Because a
// record's identity is an HMAC, a record indexed under an older secret is
// looked up there too: Get tries each secret's identity in turn, and Reserve
// counts a live record under an older secret's identity as existing (taking
// it over there when it is stale), then, after reserving under the primary,
// checks the older identities once more and steps back if a process still
// running with the old secret first reserved the key meanwhile. A rotation
// therefore never runs a key twice, at the cost of one extra read per older
// secret on each call while the ring holds more than one.
//
// The procedure, for gateways sharing one store:
//
//  1. Add the new secret second (IDEM_SECRET=old,new) on every gateway.
//     Nothing changes yet, but every gateway can now read the new secret's
//     records, so step 2 can roll out gateway by gateway, and be rolled
//     back.
//  2. Put it first (IDEM_SECRET=new,old) on every gateway. New records are
//     sealed and indexed with it; old records still replay.
//  3. After one TTL (the longest of your routes), every record the old
//     secret sealed has expired: drop it (IDEM_SECRET=new).
//
// Dropping a secret earlier makes the records it indexed invisible: their
// keys count as new and may run again. A record found under a secret still
// in the ring but sealed by one that is not (a stale takeover after a
// rotation that was rolled back) fails with ErrUnknownKey, which names the
// missing key ID; it is never opened with the wrong key.
//
// A record that cannot be opened is a store error to the engine. Keep
// on_store_error at fail_closed (the default) with a secret: under
// fail_open the engine would run the operation unprotected instead.
//
// Turning a secret on for a store that already holds plaintext records is a
// rotation from "no secret": the plaintext records are not found through
// Wrap. Do it when no key that is in flight or may be retried matters, or
// after one TTL of quiet.
//
// # Keyed hashes outside the store
//
// The engine names records with store.HashKey and the HTTP middleware
// scopes callers by a hash of their credentials (idemhttp.HashCredential)
// before anything reaches Wrap; Wrap keys both, under each secret, before
// they are stored or sent to a Notifier. Keyring.MAC gives a keyed hash
// under the primary secret, for idem.WithKeyHash or
// idemhttp.Options.CredentialMAC over a store that is not wrapped. Such a
// hash changes when the primary secret does: every caller's scope, or every
// record's name, would change at step 2 of a rotation, and retries of keys
// sent before it would run again. That is why the gateway leaves both at
// their defaults and relies on Wrap, whose identities rotate record by
// record.
//
// Keyring.PrintMAC keys what leaves the process otherwise: the scope and
// key hashes that logs, trace attributes and the admin page print
// (idem.Redactor), under a key derived from the primary secret for that
// purpose alone. A printed hash is never a record's identity, so a
// rotation only changes how later lines print.
package seal
