package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	// of the bucket, as in seed 004.
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

// metaExpiresAt is the user metadata (x-amz-meta-idem-expires-at) that
// repeats the record's expires_at, so that Cleanup can judge an object by a
// HEAD instead of downloading its value.
const metaExpiresAt = "idem-expires-at"

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

	// held remembers, per object key, the last record this process wrote
	// for a reservation it holds and that object's ETag, so that Renew,
	// Complete and Release can write with If-Match at once instead of
	// reading first. A stale entry only costs a failed write and a read:
	// If-Match is what fences, never the memory.
	mu   sync.Mutex
	held map[string]heldObject // guarded by mu
}

type heldObject struct {
	rec  store.Record
	etag string
}

var _ store.Store = (*Store)(nil)

// New returns a store that keeps its records in opts.Bucket through
// client. The store does not own the client; nothing needs closing but the
// store itself.
//
// The server must honour conditional writes: If-None-Match: * and If-Match
// on PutObject (AWS S3 since 2024, versitygw, MinIO), and preferably
// If-Match on DeleteObject (see the package documentation). A server that
// ignores them silently loses the guarantee.
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

// ObjectKey returns the key of the object that holds the record of keyHash
// in scope (seed 004's idempotency/{scope}/{key_hash}.json, under Prefix).
func (s *Store) ObjectKey(scope, keyHash string) string {
	return s.prefix + Dir + ScopeSegment(scope) + "/" + keyHash + ".json"
}

func (s *Store) objectKey(op, scope, keyHash string) (string, error) {
	if !validKeyHash(keyHash) {
		return "", fmt.Errorf("s3store: %s: invalid key hash %q (want store.HashKey's 64 hex digits)", op, keyHash)
	}
	return s.ObjectKey(scope, keyHash), nil
}

// Reserve implements store.Store: seed 004's create with If-None-Match: *,
// and, when an object is already there and is expired or stale, its
// replacement with If-Match on the ETag it was read with.
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	const op = "reserve"
	if err := s.check(ctx, op); err != nil {
		return store.Reservation{}, err
	}
	rec := req.Record
	rec.State, rec.Value = store.InProgress, nil
	key, err := s.objectKey(op, rec.Scope, rec.KeyHash)
	if err != nil {
		return store.Reservation{}, err
	}
	body, err := encode(&rec)
	if err != nil {
		return store.Reservation{}, err
	}
	etag, err := s.put(ctx, key, body, rec.ExpiresAt, "", true)
	if err == nil {
		s.remember(key, rec, etag)
		return store.Reservation{Acquired: true}, nil
	}
	if !conflict(err) {
		return store.Reservation{}, s.wrap(ctx, op, key, err)
	}
	tookOver := false
	for range maxRounds {
		cur, curBody, curETag, err := s.read(ctx, key, rec.KeyHash)
		switch {
		case errors.Is(err, errAbsent):
			// Released or cleaned up since the create failed: create again.
			tookOver = false
			etag, err = s.put(ctx, key, body, rec.ExpiresAt, "", true)
		case err != nil:
			return store.Reservation{}, s.wrap(ctx, op, key, err)
		case bytes.Equal(curBody, body):
			// Our own write: the SDK retried a request whose answer was
			// lost, and the retry found the object the first try made.
			s.remember(key, rec, curETag)
			return store.Reservation{Acquired: true, TookOver: tookOver}, nil
		default:
			live := !cur.Expired(req.Now)
			if live && !(req.TakeOverStale && cur.Stale(req.Now) &&
				cur.Fingerprint == rec.Fingerprint && cur.Binding == rec.Binding) {
				return store.Reservation{Existing: cur}, nil
			}
			// Expired (absent to every reader) or stale: replace exactly
			// the version read. Of racers who read the same version, the
			// server lets one write; the others re-read its record.
			tookOver = live
			etag, err = s.put(ctx, key, body, rec.ExpiresAt, curETag, false)
		}
		if err == nil {
			s.remember(key, rec, etag)
			return store.Reservation{Acquired: true, TookOver: tookOver}, nil
		}
		if !conflict(err) {
			return store.Reservation{}, s.wrap(ctx, op, key, err)
		}
	}
	return store.Reservation{}, fmt.Errorf("s3store: %s %s: the object changed %d times while reserving; try again", op, key, maxRounds)
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, scope, keyHash string, now time.Time) (store.Record, error) {
	const op = "get"
	if err := s.check(ctx, op); err != nil {
		return store.Record{}, err
	}
	key, err := s.objectKey(op, scope, keyHash)
	if err != nil {
		return store.Record{}, err
	}
	r, _, _, err := s.read(ctx, key, keyHash)
	if errors.Is(err, errAbsent) {
		return store.Record{}, store.ErrNotFound
	}
	if err != nil {
		return store.Record{}, s.wrap(ctx, op, key, err)
	}
	// S3 does not expire anything on the caller's clock: the reader does.
	if r.Expired(now) {
		return store.Record{}, store.ErrNotFound
	}
	return r, nil
}

// Renew implements store.Store. It leaves ExpiresAt alone: a lease never
// keeps a record past its lifetime.
func (s *Store) Renew(ctx context.Context, f store.Fence, leaseUntil time.Time) error {
	return s.update(ctx, "renew", f, func(r *store.Record) { r.LeaseUntil = leaseUntil }, true)
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	if c.State != store.Succeeded && c.State != store.Failed {
		return fmt.Errorf("s3store: complete: state %q is not succeeded or failed", c.State)
	}
	return s.update(ctx, "complete", c.Fence, func(r *store.Record) {
		r.State = c.State
		r.Value = c.Value
		r.UpdatedAt = c.Now
		r.ExpiresAt = c.ExpiresAt
	}, false)
}

// update rewrites the in_progress record that f's token holds with change
// applied, with If-Match on the version that was checked. keep tells
// whether the process goes on holding the record afterwards.
func (s *Store) update(ctx context.Context, op string, f store.Fence, change func(*store.Record), keep bool) error {
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
			cur, curBody, curETag, err := s.read(ctx, key, f.KeyHash)
			switch {
			case errors.Is(err, errAbsent):
				s.forget(key)
				return fmt.Errorf("s3store: %s %s: %w (no record)", op, key, store.ErrLeaseLost)
			case err != nil:
				return s.wrap(ctx, op, key, err)
			case sent != nil && bytes.Equal(curBody, sent):
				// Our own write, whose answer was lost and whose retry the
				// server refused because the first try had changed the ETag.
				s.settle(key, cur, curETag, keep)
				return nil
			case cur.Token != f.Token || cur.State != store.InProgress:
				s.forget(key)
				return fmt.Errorf("s3store: %s %s: %w (record is %s with another holder or finished)", op, key, store.ErrLeaseLost, cur.State)
			}
			h = heldObject{rec: cur, etag: curETag}
		}
		next := h.rec
		change(&next)
		body, err := encode(&next)
		if err != nil {
			return err
		}
		sent = body
		etag, err := s.put(ctx, key, body, next.ExpiresAt, h.etag, false)
		if err == nil {
			s.settle(key, next, etag, keep)
			return nil
		}
		if !conflict(err) {
			return s.wrap(ctx, op, key, err)
		}
		ok = false // changed since: read it and decide again
	}
	return fmt.Errorf("s3store: %s %s: the object changed %d times while writing; try again", op, key, maxRounds)
}

// Release implements store.Store: DeleteObject with If-Match on the
// version whose token was checked. See the package documentation for
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
	var h heldObject
	ok, tried := false, false
	for range maxRounds {
		if !ok {
			cur, _, curETag, err := s.read(ctx, key, f.KeyHash)
			switch {
			case errors.Is(err, errAbsent) && tried:
				// Gone after a delete of ours whose answer was lost: the key
				// is free, which is what the caller asked for.
				s.forget(key)
				return nil
			case errors.Is(err, errAbsent):
				s.forget(key)
				return fmt.Errorf("s3store: %s %s: %w (no record)", op, key, store.ErrLeaseLost)
			case err != nil:
				return s.wrap(ctx, op, key, err)
			case cur.Token != f.Token || cur.State == store.Succeeded:
				// A failed record is released too: an operator frees a key
				// whose outcome is unknown. A succeeded one never is.
				s.forget(key)
				return fmt.Errorf("s3store: %s %s: %w (record is %s with another holder or succeeded)", op, key, store.ErrLeaseLost, cur.State)
			}
			h = heldObject{rec: cur, etag: curETag}
		}
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
			Bucket:  &s.bucket,
			Key:     &key,
			IfMatch: aws.String(h.etag),
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
	return fmt.Errorf("s3store: %s %s: the object changed %d times while releasing; try again", op, key, maxRounds)
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

// read GETs the object under key and decodes it. The body and the ETag come
// from one response, so a write with If-Match on that ETag succeeds only if
// nothing changed since the body was written.
func (s *Store) read(ctx context.Context, key, keyHash string) (store.Record, []byte, string, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		if notFound(err) {
			return store.Record{}, nil, "", errAbsent
		}
		return store.Record{}, nil, "", err
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return store.Record{}, nil, "", err
	}
	if out.ETag == nil || *out.ETag == "" {
		return store.Record{}, nil, "", fmt.Errorf("s3store: %s: the server sent no ETag; conditional writes are impossible", key)
	}
	r, err := decode(keyHash, body)
	if err != nil {
		return store.Record{}, nil, "", err
	}
	return r, body, *out.ETag, nil
}

// put writes body under key: with If-None-Match: * when create, else with
// If-Match: ifMatch. It returns the new object's ETag ("" if the server sent
// none, which only costs a read before the next write).
func (s *Store) put(ctx context.Context, key string, body []byte, expiresAt time.Time, ifMatch string, create bool) (string, error) {
	in := &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String("application/json"),
		Metadata:      map[string]string{metaExpiresAt: expiresAt.UTC().Format(time.RFC3339Nano)},
	}
	if create {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(ifMatch)
	}
	out, err := s.client.PutObject(ctx, in)
	if err != nil {
		return "", err
	}
	return aws.ToString(out.ETag), nil
}

// remember notes that this process holds key with rec, as written with etag.
func (s *Store) remember(key string, rec store.Record, etag string) {
	if etag == "" {
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
	s.held[key] = heldObject{rec: rec, etag: etag}
}

// recall returns what this process last wrote for key under token.
func (s *Store) recall(key string, token uint64) (heldObject, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[key]
	if !ok || h.rec.Token != token {
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
func (s *Store) settle(key string, rec store.Record, etag string, keep bool) {
	if keep {
		s.remember(key, rec, etag)
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

// wrap names the operation and makes sure that errors.Is finds the
// context's error when the context ended the call.
func (s *Store) wrap(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("s3store: %s %s: %w: %w", op, key, cerr, err)
	}
	return fmt.Errorf("s3store: %s %s: %w", op, key, err)
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
