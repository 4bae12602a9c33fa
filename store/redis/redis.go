package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/wakeup"
	"github.com/idem-dev/idem/store"
)

// DefaultPrefix starts every key name when Options.Prefix is empty.
const DefaultPrefix = "idem:"

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// Prefix starts the name of every Redis key the store writes; "" means
	// DefaultPrefix. Stores with different prefixes never see each other's
	// records. It must not contain '{' or '}', which would move every record
	// into the prefix's hash slot.
	Prefix string
}

// WithDefaults returns o with its empty fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	return o
}

func (o Options) validate() error {
	if strings.ContainsAny(o.Prefix, "{}") {
		return fmt.Errorf("redisstore: prefix %q contains '{' or '}'", o.Prefix)
	}
	return nil
}

// Store keeps idempotency records in Redis, one hash per record under
// Prefix + "{" + key hash + "}". It is safe for concurrent use. Its zero
// value is not usable; call New.
type Store struct {
	client redis.UniversalClient
	prefix string
	// deadlines: the client bounds its socket I/O by the context's deadline
	// (ContextTimeoutEnabled), so a call with a deadline needs no watchdog.
	deadlines bool
	closed    atomic.Bool

	// notify is the subscribed connection of Subscribe, made once by
	// notifyOnce (notify.go).
	notifyOnce sync.Once
	notify     *wakeup.Listener
}

var _ store.Store = (*Store)(nil)

// New returns a store that talks to Redis through client: a *redis.Client,
// a *redis.ClusterClient or any other UniversalClient. The store does not
// close client; the caller who made it does, after closing the store.
//
// Give the client ContextTimeoutEnabled: true. Without it go-redis ignores
// context deadlines on the socket, and the store has to run each call with
// a deadline in a goroutine of its own so as to return by the deadline,
// which costs throughput.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Store{client: client, prefix: opts.Prefix, deadlines: honorsDeadlines(client)}, nil
}

func honorsDeadlines(c redis.UniversalClient) bool {
	// A read or write timeout of -2 turns socket deadlines off altogether,
	// the context's included.
	ok := func(enabled bool, rt, wt time.Duration) bool { return enabled && rt != -2 && wt != -2 }
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		return ok(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	case *redis.ClusterClient:
		o := c.Options()
		return ok(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	case *redis.Ring:
		o := c.Options()
		return ok(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	}
	return false
}

// Key returns the Redis key name of the record with keyHash. The hash tag
// (the braces) puts the whole record in one cluster slot chosen by the key
// hash, so records spread over the cluster and every script touches one slot.
func (s *Store) Key(keyHash string) string {
	return s.prefix + "{" + keyHash + "}"
}

func (s *Store) key(keyHash string) (string, error) {
	if keyHash == "" || strings.ContainsAny(keyHash, "{}") {
		return "", fmt.Errorf("redisstore: invalid key hash %q", keyHash)
	}
	return s.Key(keyHash), nil
}

// Reserve implements store.Store.
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	r := &req.Record
	key, err := s.key(r.KeyHash)
	if err != nil {
		return store.Reservation{}, err
	}
	takeOver := "0"
	if req.TakeOverStale {
		takeOver = "1"
	}
	reply, err := s.eval(ctx, "reserve", reserveScript, key,
		micros(req.Now), takeOver, pttl(r.ExpiresAt, req.Now),
		strconv.FormatUint(r.Token, 10), r.Fingerprint, r.Binding, r.Scope, r.Key, r.RequestID,
		micros(r.CreatedAt), micros(r.UpdatedAt), micros(r.ExpiresAt), micros(r.LeaseUntil))
	if err != nil {
		return store.Reservation{}, err
	}
	switch v := reply.(type) {
	case int64:
		return store.Reservation{Acquired: true, TookOver: v == 2}, nil
	case []any:
		existing, err := parseRecord(r.KeyHash, v)
		if err != nil {
			return store.Reservation{}, err
		}
		return store.Reservation{Existing: existing}, nil
	}
	return store.Reservation{}, fmt.Errorf("redisstore: reserve: unexpected reply %T", reply)
}

// Get implements store.Store. The key hash already names the scope, so
// scope is not used.
func (s *Store) Get(ctx context.Context, _, keyHash string, now time.Time) (store.Record, error) {
	key, err := s.key(keyHash)
	if err != nil {
		return store.Record{}, err
	}
	// One HMGET is atomic: no script needed to read.
	reply, err := s.run(ctx, "get", func(ctx context.Context) (any, error) {
		return s.client.HMGet(ctx, key, fields...).Result()
	})
	if err != nil {
		return store.Record{}, err
	}
	vals, _ := reply.([]any)
	if len(vals) == 0 || vals[0] == nil {
		return store.Record{}, store.ErrNotFound
	}
	r, err := parseRecord(keyHash, vals)
	if err != nil {
		return store.Record{}, err
	}
	// The key's TTL is real time; the caller's clock decides.
	if r.Expired(now) {
		return store.Record{}, store.ErrNotFound
	}
	return r, nil
}

// Renew implements store.Store. It leaves the record's lifetime alone: a
// lease never keeps a record past its ExpiresAt.
func (s *Store) Renew(ctx context.Context, f store.Fence, leaseUntil time.Time) error {
	return s.fenced(ctx, "renew", f.KeyHash, renewScript, strconv.FormatUint(f.Token, 10), micros(leaseUntil))
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	if c.State != store.Succeeded && c.State != store.Failed {
		return fmt.Errorf("redisstore: complete: state %q is not succeeded or failed", c.State)
	}
	value := c.Value
	if value == nil {
		value = []byte{}
	}
	return s.fenced(ctx, "complete", c.KeyHash, completeScript,
		strconv.FormatUint(c.Token, 10), string(c.State), value,
		micros(c.Now), micros(c.ExpiresAt), pttl(c.ExpiresAt, c.Now))
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.fenced(ctx, "release", f.KeyHash, releaseScript, strconv.FormatUint(f.Token, 10))
}

// fenced runs a script that answers 1 when the token held the record and 0
// when it did not.
func (s *Store) fenced(ctx context.Context, op, keyHash string, script *redis.Script, args ...any) error {
	key, err := s.key(keyHash)
	if err != nil {
		return err
	}
	reply, err := s.eval(ctx, op, script, key, args...)
	if err != nil {
		return err
	}
	switch reply {
	case int64(1):
		return nil
	case int64(0):
		return store.ErrLeaseLost
	}
	return fmt.Errorf("redisstore: %s: unexpected reply %v", op, reply)
}

// eval runs script on key (EVALSHA, or EVAL when the server lacks it).
func (s *Store) eval(ctx context.Context, op string, script *redis.Script, key string, args ...any) (any, error) {
	keys := []string{key}
	return s.run(ctx, op, func(ctx context.Context) (any, error) {
		return script.Run(ctx, s.client, keys, args...).Result()
	})
}

// Cleanup implements store.Store. Redis expires records itself (every
// write sets the key's TTL to the record's remaining lifetime), so there is
// nothing to delete and Cleanup returns 0.
func (s *Store) Cleanup(ctx context.Context, _ time.Time, _ int) (int, error) {
	if err := s.check(ctx, "cleanup"); err != nil {
		return 0, err
	}
	return 0, nil
}

// CountExpired is always 0: Redis drops a record the moment its TTL ends
// (`idem cleanup --dry-run`).
func (s *Store) CountExpired(ctx context.Context, _ time.Time) (int, error) {
	if err := s.check(ctx, "count expired"); err != nil {
		return 0, err
	}
	return 0, nil
}

// Close implements store.Store: later calls return store.ErrClosed. It does
// not close the client the store was given.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.closeNotify()
	return nil
}

func (s *Store) check(ctx context.Context, op string) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: %s: %w", op, store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return nil
}

// run calls fn and returns by ctx's deadline, with an error that errors.Is
// matches against the context's error. A call that ctx interrupts may still
// have taken effect on the server.
//
// A cancellation without a deadline stops a call that has not started, not
// one in flight: go-redis cannot abandon a socket read on it, and running
// every call of a request-scoped context in a goroutine of its own would
// cost more than it saves, since the client's read timeout bounds the wait.
func (s *Store) run(ctx context.Context, op string, fn func(context.Context) (any, error)) (any, error) {
	if err := s.check(ctx, op); err != nil {
		return nil, err
	}
	var (
		reply any
		err   error
	)
	if _, hasDeadline := ctx.Deadline(); hasDeadline && !s.deadlines {
		reply, err = watch(ctx, fn)
	} else {
		// No deadline, or the client itself stops at it.
		reply, err = fn(ctx)
	}
	if err != nil {
		return nil, s.wrap(ctx, op, err)
	}
	// A call that succeeded reports success even when ctx ended meanwhile:
	// the work is done.
	return reply, nil
}

type result struct {
	reply any
	err   error
}

// watch runs fn in its own goroutine so that the caller can return at ctx's
// deadline even though go-redis, not told to honour it, would go on waiting
// for the socket. The abandoned call ends by itself at the client's read
// timeout.
func watch(ctx context.Context, fn func(context.Context) (any, error)) (any, error) {
	ch := make(chan result, 1)
	go func() {
		reply, err := fn(ctx)
		ch <- result{reply, err}
	}()
	select {
	case r := <-ch:
		return r.reply, r.err
	case <-ctx.Done():
		select {
		case r := <-ch: // it finished too: keep its answer
			return r.reply, r.err
		default:
			return nil, ctx.Err()
		}
	}
}

func (s *Store) wrap(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		// go-redis reports a passed deadline as an i/o timeout: name the
		// context's error so that errors.Is finds it.
		return fmt.Errorf("redisstore: %s: %w: %w", op, cerr, err)
	}
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrClosed, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

// micros encodes t as Unix microseconds, the precision records keep.
func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// pttl is the key's time to live in milliseconds: the record's remaining
// lifetime on the caller's clock, rounded up so that Redis never drops a
// record before its ExpiresAt, and at least 1 (PEXPIRE 0 deletes the key at
// once; a record already expired is absent to readers anyway).
func pttl(expiresAt, now time.Time) int64 {
	d := expiresAt.Sub(now)
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return max(ms, 1)
}

// parseRecord decodes a reply laid out as fields.
func parseRecord(keyHash string, vals []any) (store.Record, error) {
	if len(vals) != len(fields) {
		return store.Record{}, fmt.Errorf("redisstore: record %s: %d fields, want %d", keyHash, len(vals), len(fields))
	}
	str := func(i int) string { s, _ := vals[i].(string); return s }
	var perr error
	when := func(i int) time.Time {
		n, err := strconv.ParseInt(str(i), 10, 64)
		if err != nil && perr == nil {
			perr = fmt.Errorf("redisstore: record %s: field %s: %w", keyHash, fields[i], err)
		}
		return time.UnixMicro(n).UTC()
	}
	tok, err := strconv.ParseUint(str(1), 10, 64)
	if err != nil {
		return store.Record{}, fmt.Errorf("redisstore: record %s: token: %w", keyHash, err)
	}
	r := store.Record{
		KeyHash:     keyHash,
		State:       store.State(str(0)),
		Token:       tok,
		Fingerprint: str(2),
		Binding:     str(3),
		Scope:       str(4),
		Key:         str(5),
		RequestID:   str(6),
		CreatedAt:   when(7),
		UpdatedAt:   when(8),
		ExpiresAt:   when(9),
		LeaseUntil:  when(10),
	}
	if v, ok := vals[11].(string); ok {
		r.Value = []byte(v)
	}
	if perr != nil {
		return store.Record{}, perr
	}
	if !r.State.Valid() {
		return store.Record{}, fmt.Errorf("redisstore: record %s: invalid state %q", keyHash, r.State)
	}
	return r, nil
}
