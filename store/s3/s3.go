package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/keyhash"
	"github.com/idem-dev/idem/store/internal/leasewatch"
)

// Options configure a Store.
type Options struct {
	// Bucket holds the records. It must exist; the store never creates or
	// configures buckets.
	Bucket string
	// Prefix is put before Dir in every object key, so that several
	// applications share one bucket: "billing/" gives
	// billing/idempotency/{scope}/{key_hash}.json. A prefix that does not
	// end in "/" gets one. "" (the default) puts idempotency/ at the root
	// of the bucket.
	Prefix string
}

// WithDefaults returns o with Prefix normalised.
func (o Options) WithDefaults() Options {
	if o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Bucket == "":
		return errors.New("s3store: no bucket")
	case strings.HasPrefix(o.Prefix, "/"):
		return fmt.Errorf("s3store: prefix %q starts with '/'", o.Prefix)
	}
	return nil
}

// maxRounds bounds how often one call re-reads a record that others keep
// changing under it. Each round ends with someone else's successful write,
// so running out means heavy contention, reported as an error.
const maxRounds = 16

// maxHeld bounds the memory of records this process holds (see held).
const maxHeld = 4096

// Metadata (x-amz-meta-...) that repeats what Cleanup needs to judge an
// object by a HEAD instead of downloading its value: the TTL and, for a
// renewed reservation, the instant it counts from. metaExpiresAt repeats
// expires_at for the Cleanup of the code from before durations were
// stored, while a deployment rolls.
const (
	metaTTL       = "idem-ttl"
	metaTTLFrom   = "idem-ttl-from"
	metaExpiresAt = "idem-expires-at"
)

// Store keeps idempotency records as JSON objects in an S3 bucket, one per
// key: Prefix + "idempotency/" + ScopeSegment(scope) + "/" + key hash +
// ".json". Every transition is a conditional write, so any number of
// processes may share a bucket. It is safe for concurrent use; its zero
// value is not usable: call New.
type Store struct {
	client *s3.Client
	bucket string
	prefix string
	closed atomic.Bool

	// watch judges the leases of in_progress records by observe and
	// wait (docs/stores/S3.md, "Clocks"). What it saw of a key is never
	// dropped when this client writes the key or finds it ended: a
	// concurrent call of this process may still be judging an older
	// version it read, which must count as watched, not as new. Versions
	// never come back (each write of a key has bytes of its own), and the
	// watch prunes what nobody looks at.
	watch leasewatch.Watcher
	// clock estimates the server's clock for the times written for
	// display.
	clock serverClock

	// held remembers, per object key, the last record this process wrote
	// for a reservation it holds and that object's ETag, so that Renew,
	// Complete and Release can write with If-Match at once instead of
	// reading first. A stale entry only costs a failed write and a read:
	// If-Match is what fences, never the memory.
	mu   sync.Mutex
	held map[string]heldObject // guarded by mu
}

type heldObject struct {
	st   stored
	etag string
	// base is the instant on the server's clock that the reservation's
	// TTL counts from: the Date of the answer to the write that made it
	// (no earlier than its Last-Modified), or the Last-Modified read.
	base time.Time
}

var _ store.Store = (*Store)(nil)

// New returns a store that keeps its records in opts.Bucket through
// client. The store does not own the client; nothing needs closing but the
// store itself.
//
// The server must honour conditional writes: If-None-Match: * and If-Match
// on PutObject (AWS S3 since 2024, versitygw, MinIO), and preferably
// If-Match on DeleteObject (docs/stores/S3.md says what servers differ
// on). A server that ignores them silently loses the guarantee. Its
// answers must carry a Date header, as HTTP servers' do: expiry is judged
// on it.
func New(client *s3.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("s3store: nil client")
	}
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Store{client: client, bucket: opts.Bucket, prefix: opts.Prefix, held: make(map[string]heldObject)}, nil
}

// Options returns the store's options, defaults applied.
func (s *Store) Options() Options { return Options{Bucket: s.bucket, Prefix: s.prefix} }

// HashKey names the record of key in scope as seed 004 does,
// sha256(scope:key) (store.LegacyHashKey): its scope's folder keeps it
// apart from every other scope's, so the hash need not frame the scope,
// and objects written before store.HashKey framed it keep their names
// (store.KeyHasher).
func (s *Store) HashKey(scope, key string) string { return store.LegacyHashKey(scope, key) }

var _ store.KeyHasher = (*Store)(nil)

// ObjectKey returns the key of the object that holds the record of keyHash
// in scope: idempotency/{scope}/{key_hash}.json, under Prefix.
func (s *Store) ObjectKey(scope, keyHash string) string {
	return s.prefix + Dir + ScopeSegment(scope) + "/" + keyHash + ".json"
}

func (s *Store) objectKey(op, scope, keyHash string) (string, error) {
	if !keyhash.Valid(keyHash) {
		return "", fmt.Errorf("s3store: %s: invalid key hash %q (want store.HashKey's 64 hex digits)", op, keyHash)
	}
	return s.ObjectKey(scope, keyHash), nil
}

// Reserve implements store.Store: a create with If-None-Match: *,
// and, when an object is already there and is expired or stale, its
// replacement with If-Match on the ETag it was read with. Expired is
// judged by the server's Date; stale by this client's watch of that ETag.
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	const op = "reserve"
	if err := s.check(ctx, op); err != nil {
		return store.Reservation{}, err
	}
	st := stored{rec: req.Record, ttl: req.TTL, lease: req.Lease}
	rec := &st.rec
	rec.State, rec.Value = store.InProgress, nil
	key, err := s.objectKey(op, rec.Scope, rec.KeyHash)
	if err != nil {
		return store.Reservation{}, err
	}
	now := s.clock.now()
	rec.CreatedAt, rec.UpdatedAt = now, now
	rec.ExpiresAt, rec.LeaseUntil = now.Add(req.TTL), now.Add(req.Lease)
	body, err := encode(&st)
	if err != nil {
		return store.Reservation{}, err
	}
	w, err := s.put(ctx, op, key, body, &st, "", true)
	if err == nil {
		s.remember(key, heldObject{st: st, etag: w.etag, base: w.date})
		return store.Reservation{Acquired: true}, nil
	}
	if !conflict(err) {
		return store.Reservation{}, s.wrap(ctx, op, key, err)
	}
	tookOver := false
	for range maxRounds {
		cur, curBody, v, expired, err := s.readJudged(ctx, op, key, rec.KeyHash)
		switch {
		case errors.Is(err, errAbsent):
			// Released or cleaned up since the create failed: create again.
			tookOver = false
			w, err = s.put(ctx, op, key, body, &st, "", true)
		case err != nil:
			return store.Reservation{}, s.wrap(ctx, op, key, err)
		case bytes.Equal(curBody, body):
			// Our own write: the SDK retried a request whose answer was
			// lost, and the retry found the object the first try made.
			s.remember(key, heldObject{st: st, etag: v.etag, base: v.modified})
			return store.Reservation{Acquired: true, TookOver: tookOver}, nil
		default:
			live := !expired
			if live {
				r := s.record(key, &cur, v)
				if !(req.TakeOverStale && r.Stale() &&
					r.Fingerprint == rec.Fingerprint && r.Binding == rec.Binding) {
					return store.Reservation{Existing: r}, nil
				}
			}
			// Expired (absent to every reader) or stale: replace exactly
			// the version read. Of racers who read the same version, the
			// server lets one write; the others re-read its record.
			tookOver = live
			w, err = s.put(ctx, op, key, body, &st, v.etag, false)
		}
		if err == nil {
			s.remember(key, heldObject{st: st, etag: w.etag, base: w.date})
			return store.Reservation{Acquired: true, TookOver: tookOver}, nil
		}
		if !conflict(err) {
			return store.Reservation{}, s.wrap(ctx, op, key, err)
		}
	}
	return store.Reservation{}, fmt.Errorf("s3store: %s %s: the object changed %d times while reserving; try again", op, printedKey(key), maxRounds)
}

// record returns the record st of the version v of the object key, as
// read: its times on the server's clock, ReadAt the Date of the answer,
// and, in progress, LeaseLeft as this client's watch of the version
// judges it. A read of the version this process holds makes the memory's
// base exact (see heldObject).
func (s *Store) record(key string, st *stored, v version) store.Record {
	r := st.rec
	if r.State == store.InProgress {
		s.learnBase(key, v.etag, st.base(v.modified))
	}
	r.ReadAt = v.date
	r.UpdatedAt = v.modified
	r.ExpiresAt = st.expiresAt(v.modified)
	switch {
	case st.legacy:
		// Shifted onto the server's clock with the writer's own span.
		r.CreatedAt = v.modified.Add(-max(st.rec.UpdatedAt.Sub(st.rec.CreatedAt), 0))
	case r.State == store.InProgress:
		// The reservation's start: this version's write, or the one
		// its renewals name.
		r.CreatedAt = st.base(v.modified)
	}
	r.LeaseLeft = 0
	if r.State == store.InProgress {
		// For display, the lease ends a lease after the Date of the
		// answer that first showed this version: the same from one read
		// to the next, ReadAt + LeaseLeft to within the Date's second.
		var since time.Time
		r.LeaseLeft, since = s.watch.Watch(key, v.watched, st.lease, v.date)
		r.LeaseUntil = since.Add(st.lease)
	}
	return r
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	const op = "get"
	if err := s.check(ctx, op); err != nil {
		return store.Record{}, err
	}
	key, err := s.objectKey(op, scope, keyHash)
	if err != nil {
		return store.Record{}, err
	}
	st, _, v, expired, err := s.readJudged(ctx, op, key, keyHash)
	if errors.Is(err, errAbsent) {
		return store.Record{}, store.ErrNotFound
	}
	if err != nil {
		return store.Record{}, s.wrap(ctx, op, key, err)
	}
	// S3 expires nothing by itself: the reader judges, on the server's
	// clock.
	if expired {
		return store.Record{}, store.ErrNotFound
	}
	return s.record(key, &st, v), nil
}

// Renew implements store.Store. The new version stores lease, and keeps
// the reservation's expiry by naming the instant its TTL counts from: a
// lease never keeps a record past its lifetime. It changes the body (a
// renewal count), so that every watcher sees a new ETag.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	return s.update(ctx, "renew", f, func(h *heldObject, now time.Time) {
		st := &h.st
		st.lease = lease
		st.renewal++
		st.ttlFrom = h.base
		st.rec.CreatedAt = h.base
		st.rec.UpdatedAt = now
		st.rec.ExpiresAt = h.base.Add(st.ttl)
		st.rec.LeaseUntil = now.Add(lease)
	}, true)
}

// Complete implements store.Store. The record lives c.TTL from the
// completion's own write.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	if c.State != store.Succeeded && c.State != store.Failed {
		return fmt.Errorf("s3store: complete: state %q is not succeeded or failed", c.State)
	}
	return s.update(ctx, "complete", c.Fence, func(h *heldObject, now time.Time) {
		st := &h.st
		st.rec.State = c.State
		st.rec.Value = c.Value
		st.ttl, st.ttlFrom = c.TTL, time.Time{}
		st.lease, st.renewal = 0, 0
		st.rec.CreatedAt = h.base
		st.rec.UpdatedAt = now
		st.rec.ExpiresAt = now.Add(c.TTL)
	}, false)
}

// update rewrites the in_progress record that f's token holds with change
// applied, with If-Match on the version that was checked. change gets a
// copy of what is held and the estimate of the server's clock for the
// display times. keep tells whether the process goes on holding the
// record afterwards.
func (s *Store) update(ctx context.Context, op string, f store.Fence, change func(*heldObject, time.Time), keep bool) error {
	if err := s.check(ctx, op); err != nil {
		return err
	}
	key, err := s.objectKey(op, f.Scope, f.KeyHash)
	if err != nil {
		return err
	}
	h, ok := s.recall(key, f.Token)
	var sent []byte // the body last sent, to recognise it on a re-read
	for range maxRounds {
		if !ok {
			cur, curBody, v, err := s.read(ctx, op, key, f.KeyHash)
			switch {
			case errors.Is(err, errAbsent):
				s.forget(key)
				return fmt.Errorf("s3store: %s %s: %w (no record)", op, printedKey(key), store.ErrLeaseLost)
			case err != nil:
				return s.wrap(ctx, op, key, err)
			case sent != nil && bytes.Equal(curBody, sent):
				// Our own write, whose answer was lost and whose retry the
				// server refused because the first try had changed the ETag.
				s.settle(key, heldObject{st: cur, etag: v.etag, base: h.base}, keep)
				return nil
			case cur.rec.Token != f.Token || cur.rec.State != store.InProgress:
				s.forget(key)
				return fmt.Errorf("s3store: %s %s: %w (record is %s with another holder or finished)", op, printedKey(key), store.ErrLeaseLost, cur.rec.State)
			}
			h = heldObject{st: cur, etag: v.etag, base: cur.base(v.modified)}
		}
		next := h
		change(&next, s.clock.now())
		body, err := encode(&next.st)
		if err != nil {
			return err
		}
		sent = body
		w, err := s.put(ctx, op, key, body, &next.st, h.etag, false)
		if err == nil {
			next.etag = w.etag
			s.settle(key, next, keep)
			return nil
		}
		if !conflict(err) {
			return s.wrap(ctx, op, key, err)
		}
		ok = false // changed since: read it and decide again
	}
	return fmt.Errorf("s3store: %s %s: the object changed %d times while writing; try again", op, printedKey(key), maxRounds)
}

// Release implements store.Store: DeleteObject with If-Match on the
// version whose token was checked. See docs/stores/S3.md for
// servers that ignore If-Match on DeleteObject.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	const op = "release"
	if err := s.check(ctx, op); err != nil {
		return err
	}
	key, err := s.objectKey(op, f.Scope, f.KeyHash)
	if err != nil {
		return err
	}
	// Always read first, never from memory: on a server that ignores
	// If-Match on DeleteObject, the token check just before the delete is
	// the only fence, and it must be fresh.
	var etag string
	ok, tried := false, false
	for range maxRounds {
		if !ok {
			cur, _, v, err := s.read(ctx, op, key, f.KeyHash)
			switch {
			case errors.Is(err, errAbsent) && tried:
				// Gone after a delete of ours whose answer was lost: the key
				// is free, which is what the caller asked for.
				s.forget(key)
				return nil
			case errors.Is(err, errAbsent):
				s.forget(key)
				return fmt.Errorf("s3store: %s %s: %w (no record)", op, printedKey(key), store.ErrLeaseLost)
			case err != nil:
				return s.wrap(ctx, op, key, err)
			case cur.rec.Token != f.Token || cur.rec.State == store.Succeeded:
				// A failed record is released too: an operator frees a key
				// whose outcome is unknown. A succeeded one never is.
				s.forget(key)
				return fmt.Errorf("s3store: %s %s: %w (record is %s with another holder or succeeded)", op, printedKey(key), store.ErrLeaseLost, cur.rec.State)
			}
			etag = v.etag
		}
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
			Bucket:  &s.bucket,
			Key:     &key,
			IfMatch: aws.String(etag),
		})
		if err == nil {
			s.forget(key)
			return nil
		}
		if !conflict(err) {
			return s.wrap(ctx, op, key, err)
		}
		tried, ok = true, false
	}
	return fmt.Errorf("s3store: %s %s: the object changed %d times while releasing; try again", op, printedKey(key), maxRounds)
}

// Close implements store.Store: later calls return store.ErrClosed. It
// does not touch the client, which the store does not own.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.mu.Lock()
	s.held = make(map[string]heldObject)
	s.mu.Unlock()
	return nil
}

// errAbsent: no object under the key.
var errAbsent = errors.New("s3store: no object")

// version is what the server's answer says of the version of an object
// read or written, beside its body.
type version struct {
	etag     string
	date     time.Time // the answer's Date: the server's clock when it answered
	modified time.Time // the version's Last-Modified (reads only)
	// watched names the version for the lease watch: the ETag and a hash
	// of the body. A server may pair an ETag with the body of another
	// version when a read races a write (versitygw reads them one after
	// the other); such a pair is a version of its own, never seen again,
	// so it never makes the record it shows stale.
	watched string
}

// read GETs the object under key and decodes it. The body, the ETag and
// the times come from one response, so a write with If-Match on that ETag
// succeeds only if nothing changed since the body was written.
func (s *Store) read(ctx context.Context, op, key, keyHash string) (stored, []byte, version, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		if notFound(err) {
			return stored{}, nil, version{}, errAbsent
		}
		return stored{}, nil, version{}, err
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return stored{}, nil, version{}, err
	}
	v := version{etag: aws.ToString(out.ETag), modified: aws.ToTime(out.LastModified)}
	switch {
	case v.etag == "":
		return stored{}, nil, version{}, fmt.Errorf("s3store: %s: the server sent no ETag; conditional writes are impossible", printedKey(key))
	case v.modified.IsZero():
		return stored{}, nil, version{}, fmt.Errorf("s3store: %s %s: the server sent no Last-Modified; the store judges expiry on the server's clock and cannot without it", op, printedKey(key))
	}
	if v.date, err = serverTime(out.ResultMetadata, op, key); err != nil {
		return stored{}, nil, version{}, err
	}
	s.clock.saw(v.date)
	st, err := decode(keyHash, body)
	if err != nil {
		return stored{}, nil, version{}, err
	}
	if st.rec.State == store.InProgress {
		sum := sha256.Sum256(body)
		v.watched = v.etag + " " + hex.EncodeToString(sum[:8])
	}
	return st, body, v, nil
}

// readJudged is read, and whether the version read has expired. A verdict
// of expired is confirmed by a second read: a server may answer a read
// that races a write with the Last-Modified of the version before and the
// ETag and body of the new one (versitygw looks them up one after the
// other), and an old Last-Modified makes a fresh record look expired.
// When the second read finds the same ETag and body, that version was in
// place from the first read to the second, so the second one's
// Last-Modified is its own. A torn read can only make a record look
// older, so a verdict of live needs no second look.
func (s *Store) readJudged(ctx context.Context, op, key, keyHash string) (stored, []byte, version, bool, error) {
	st, body, v, err := s.read(ctx, op, key, keyHash)
	if err != nil || !st.expired(v.date, v.modified) {
		return st, body, v, false, err
	}
	for range maxRounds {
		again, againBody, w, err := s.read(ctx, op, key, keyHash)
		switch {
		case err != nil:
			return stored{}, nil, version{}, false, err
		case w.etag == v.etag && bytes.Equal(againBody, body):
			return again, againBody, w, again.expired(w.date, w.modified), nil
		case !again.expired(w.date, w.modified):
			return again, againBody, w, false, nil
		}
		st, body, v = again, againBody, w
	}
	return stored{}, nil, version{}, false, fmt.Errorf("s3store: %s %s: the object changed %d times while judging its expiry; try again", op, printedKey(key), maxRounds)
}

// put writes body, the encoding of st, under key: with If-None-Match: *
// when create, else with If-Match: ifMatch. It returns the new version's
// ETag ("" if the server sent none, which only costs a read before the
// next write) and the answer's Date, no earlier than the write.
func (s *Store) put(ctx context.Context, op, key string, body []byte, st *stored, ifMatch string, create bool) (version, error) {
	meta := map[string]string{
		metaTTL:       st.ttl.String(),
		metaExpiresAt: st.rec.ExpiresAt.UTC().Format(time.RFC3339Nano),
	}
	if !st.ttlFrom.IsZero() {
		meta[metaTTLFrom] = st.ttlFrom.UTC().Format(time.RFC3339Nano)
	}
	in := &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String("application/json"),
		Metadata:      meta,
	}
	if create {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(ifMatch)
	}
	out, err := s.client.PutObject(ctx, in)
	if err != nil {
		return version{}, err
	}
	date, err := serverTime(out.ResultMetadata, op, key)
	if err != nil {
		return version{}, err
	}
	s.clock.saw(date)
	return version{etag: aws.ToString(out.ETag), date: date}, nil
}

// remember notes that this process holds key as h.
func (s *Store) remember(key string, h heldObject) {
	if h.etag == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) >= maxHeld {
		// Holders that crashed out of their reservation leave entries
		// behind; dropping any one only costs its holder a read.
		for k := range s.held {
			delete(s.held, k)
			break
		}
	}
	s.held[key] = h
}

// learnBase sets the base of what this process holds of key, when it is
// the version etag, to base read from the server: the Last-Modified of
// the reservation's first write, where the memory had the Date of its
// answer (no earlier, and usually the same second). A base more than
// learnWindow before that Date is not this write's (a read racing the
// write paired the Last-Modified of the version before with this one's
// ETag, see readJudged) and is ignored: the Date stays, later, which is
// the safe side.
func (s *Store) learnBase(key, etag string, base time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[key]; ok && h.etag == etag && !base.After(h.base) && h.base.Sub(base) <= learnWindow {
		h.base = base
		s.held[key] = h
	}
}

// learnWindow is how much earlier than the Date of the answer to a write
// its Last-Modified may be: the Date's second of precision, and a second
// for the request itself.
const learnWindow = 2 * time.Second

// recall returns what this process last wrote for key under token.
func (s *Store) recall(key string, token uint64) (heldObject, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[key]
	if !ok || h.st.rec.Token != token {
		return heldObject{}, false
	}
	return h, true
}

func (s *Store) forget(key string) {
	s.mu.Lock()
	delete(s.held, key)
	s.mu.Unlock()
}

// settle records the outcome of a successful update.
func (s *Store) settle(key string, h heldObject, keep bool) {
	if keep {
		s.remember(key, h)
	} else {
		s.forget(key)
	}
}

func (s *Store) check(ctx context.Context, op string) error {
	if s.closed.Load() {
		return fmt.Errorf("s3store: %s: %w", op, store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3store: %s: %w", op, err)
	}
	return nil
}

// printedKey is how errors name the object of key: by its record's key
// hash alone. The object key holds the scope, the caller's tenant as it
// is in a store without a secret, and the store's errors are logged
// (docs/ISOLATION.md).
func printedKey(key string) string {
	return "record " + strings.TrimSuffix(path.Base(key), ".json")
}

// scrubbed is err with the object key, which the SDK's errors quote in
// the request's URL, printed as printedKey; errors.Is and As see err.
type scrubbed struct {
	err error
	key string
}

func (e scrubbed) Error() string {
	msg, name := e.err.Error(), printedKey(e.key)
	// The URL's path escapes the scope segment's '%'.
	for _, k := range []string{e.key, (&url.URL{Path: e.key}).EscapedPath()} {
		msg = strings.ReplaceAll(msg, k, name)
	}
	return msg
}

func (e scrubbed) Unwrap() error { return e.err }

// wrap names the operation and makes sure that errors.Is finds the
// context's error when the context ended the call.
func (s *Store) wrap(ctx context.Context, op, key string, err error) error {
	err = scrubbed{err, key}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("s3store: %s %s: %w: %w", op, printedKey(key), cerr, err)
	}
	return fmt.Errorf("s3store: %s %s: %w", op, printedKey(key), err)
}

// status returns the HTTP status of a failed call, or 0.
func status(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// notFound reports a missing object (GET: NoSuchKey; HEAD, which has no
// body to name the error: NotFound), not a missing bucket.
func notFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	code := errorCode(err)
	return code == "NoSuchKey" || code == "NotFound"
}

// conflict reports whether a conditional write failed because the object
// is not the version it was conditioned on: 412 PreconditionFailed; 404
// NoSuchKey for If-Match on a deleted object (AWS, versitygw); 409
// ConditionalRequestConflict, AWS's answer to two conditional writes at
// once. In every case the writer re-reads and decides again.
func conflict(err error) bool {
	switch status(err) {
	case 412:
		return true
	case 404:
		return notFound(err)
	case 409:
		return errorCode(err) == "ConditionalRequestConflict"
	}
	return errorCode(err) == "PreconditionFailed"
}
