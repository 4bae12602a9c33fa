package dynamodbstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/internal/keyhash"
	"github.com/idem-dev/idem/store/internal/leasewatch"
)

// Options configure a Store.
type Options struct {
	// Table holds the records: a hash key "pk" of type string and nothing
	// else is required of it (Migrate creates it so).
	Table string
}

func (o Options) validate() error {
	if !ValidTableName(o.Table) {
		return fmt.Errorf("dynamodbstore: table %q: want 3 to 255 letters, digits, '_', '-' or '.'", o.Table)
	}
	return nil
}

// ValidTableName reports whether name is a DynamoDB table name: 3 to 255
// of a-z, A-Z, 0-9, '_', '-' and '.'.
func ValidTableName(name string) bool {
	if len(name) < 3 || len(name) > 255 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// maxRounds bounds how often one call re-reads a record that others keep
// changing under it. Each round ends with someone else's successful
// write, so running out means heavy contention, reported as an error.
const maxRounds = 16

// writeSlack is added to the upper bound of the server's clock when a
// write is sent, to cover the time until the server applies it. A write
// whose answer shows that it may have been applied later than that (a
// slow round trip, a retry by the SDK) is re-dated at once; see
// docs/stores/DYNAMODB.md.
const writeSlack = time.Second

// Store keeps idempotency records as items of a DynamoDB table, one per
// key. Every transition is one conditional write, so any number of
// processes may share a table. It is safe for concurrent use; its zero
// value is not usable: call New.
type Store struct {
	client *dynamodb.Client
	table  string
	closed atomic.Bool

	// watch judges the leases of in_progress records by observe and
	// wait; clock bounds the server's clock from its answers' Dates.
	watch leasewatch.Watcher
	clock serverClock

	// redated counts the writes re-dated because their answer came later
	// than writeSlack after they were sent (docs/stores/DYNAMODB.md,
	// "Expiry"); tests read it.
	redated atomic.Int64
}

var _ store.Store = (*Store)(nil)

// New returns a store that keeps its records in opts.Table through client.
// The store does not own the client; nothing needs closing but the store
// itself. The table must exist (Migrate creates it; Check checks it).
func New(client *dynamodb.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("dynamodbstore: nil client")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Store{client: client, table: opts.Table}, nil
}

// Options returns the store's options.
func (s *Store) Options() Options { return Options{Table: s.table} }

func keyOf(keyHash string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(keyHash)}
}

// answer is what the server's answer to one call says of its clock.
type answer struct {
	sent, recv time.Duration // monotonic readings around the call
	lo, hi     time.Time     // bounds of the server's clock at recv
}

// heard notes the Date of an answer sent at sent, and returns the bounds
// of the server's clock at its arrival.
func (s *Store) heard(sent time.Duration, md *middleware.Metadata, err error) answer {
	a := answer{sent: sent, recv: s.clock.now()}
	if date, ok := answerDate(md, err); ok {
		s.clock.observe(date, a.sent, a.recv)
	}
	a.lo, a.hi, _ = s.clock.bounds(a.recv)
	return a
}

// metadata is the metadata of a request's answer, nil when there is
// none (the request failed before an answer came).
func metadata(out any) *middleware.Metadata {
	switch o := out.(type) {
	case *dynamodb.GetItemOutput:
		if o != nil {
			return &o.ResultMetadata
		}
	case *dynamodb.PutItemOutput:
		if o != nil {
			return &o.ResultMetadata
		}
	case *dynamodb.UpdateItemOutput:
		if o != nil {
			return &o.ResultMetadata
		}
	case *dynamodb.DeleteItemOutput:
		if o != nil {
			return &o.ResultMetadata
		}
	case *dynamodb.ScanOutput:
		if o != nil {
			return &o.ResultMetadata
		}
	case *dynamodb.DescribeTableOutput:
		if o != nil {
			return &o.ResultMetadata
		}
	}
	return nil
}

// read returns the item of keyHash (nil when there is none), read with a
// strongly consistent GetItem, and the bounds of the server's clock when
// its answer arrived.
func (s *Store) read(ctx context.Context, keyHash string) (*item, answer, error) {
	sent := s.clock.now()
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            keyOf(keyHash),
		ConsistentRead: aws.Bool(true),
	})
	a := s.heard(sent, metadata(out), err)
	if err != nil {
		return nil, a, err
	}
	if a.lo.IsZero() {
		return nil, a, errNoDate
	}
	if len(out.Item) == 0 {
		return nil, a, nil
	}
	it, err := decode(keyHash, out.Item)
	if err != nil {
		return nil, a, err
	}
	return &it, a, nil
}

var errNoDate = errors.New("the server's answer carries no Date header; the store judges expiry on the server's clock and cannot without it")

// ensureClock makes sure the server's clock is known before a write that
// dates itself by it: a process's first call reads the record first.
func (s *Store) ensureClock(ctx context.Context, keyHash string) error {
	if s.clock.ready() {
		return nil
	}
	_, _, err := s.read(ctx, keyHash)
	return err
}

// record returns the store.Record of it as read at a: ReadAt the lower
// bound of the server's clock then, and, in progress, LeaseLeft as this
// client's watch of its version judges it.
func (s *Store) record(it *item, a answer) store.Record {
	r := it.rec
	r.CreatedAt, r.UpdatedAt = it.created, it.updated
	r.ExpiresAt = it.from.Add(it.ttl)
	r.ReadAt = a.lo
	r.LeaseLeft, r.LeaseUntil = 0, time.Time{}
	if r.State == store.InProgress {
		var since time.Time
		r.LeaseLeft, since = s.watch.Watch(r.KeyHash, it.versionID(), it.lease, a.lo)
		r.LeaseUntil = since.Add(it.lease)
	} else {
		s.watch.Forget(r.KeyHash)
	}
	return r
}

// Reserve implements store.Store: PutItem conditional on the key being
// absent, and, when an item is there and is expired or stale, its
// replacement conditional on the token and version read. Expired is
// judged on the server's clock; stale by this client's watch of the
// version.
func (s *Store) Reserve(ctx context.Context, req store.ReserveRequest) (store.Reservation, error) {
	const op = "reserve"
	if err := s.check(ctx, op); err != nil {
		return store.Reservation{}, err
	}
	rec := req.Record
	if !keyhash.Valid(rec.KeyHash) {
		return store.Reservation{}, fmt.Errorf("dynamodbstore: %s: invalid key hash %q (want store.HashKey's 64 hex digits)", op, rec.KeyHash)
	}
	rec.State, rec.Value = store.InProgress, nil
	write := newWriteID()
	var (
		cur   *item
		at    answer
		known bool // cur and at say what was read last
		tried bool // a write was sent, taking over when tookOver
		took  bool
		err   error
	)
	if !s.clock.ready() {
		if cur, at, err = s.read(ctx, rec.KeyHash); err != nil {
			return store.Reservation{}, s.wrap(ctx, op, rec.KeyHash, err)
		}
		known = true
	}
	for range maxRounds {
		it := &item{rec: rec, version: 1, lease: req.Lease, ttl: req.TTL, write: write}
		cond := "attribute_not_exists(#pk)"
		names := map[string]string{"#pk": attrPK}
		var values map[string]types.AttributeValue
		tookOver := false
		if known && cur != nil {
			if cur.write == write {
				// Our own write: the SDK retried a request whose answer
				// was lost, and the retry found the item the first try made.
				s.watch.Forget(rec.KeyHash)
				return store.Reservation{Acquired: true, TookOver: tried && took}, nil
			}
			if !cur.expired(at.lo) {
				r := s.record(cur, at)
				if !(req.TakeOverStale && r.Stale() && r.Fingerprint == rec.Fingerprint && r.Binding == rec.Binding) {
					return store.Reservation{Existing: r}, nil
				}
				tookOver = true
			}
			// Expired (absent to every reader) or stale: replace exactly
			// the version read. Of racers who read the same version, the
			// server lets one write; the others read its record.
			it.version = cur.version + 1
			cond = "#token = :token AND #ver = :ver"
			names = map[string]string{"#token": attrToken, "#ver": attrVersion}
			values = map[string]types.AttributeValue{":token": u64(cur.rec.Token), ":ver": u64(cur.version)}
		}
		tried, took = true, tookOver
		err = s.put(ctx, it, cond, names, values)
		if err == nil {
			s.watch.Forget(rec.KeyHash)
			return store.Reservation{Acquired: true, TookOver: tookOver}, nil
		}
		if !conditionFailed(err) {
			return store.Reservation{}, s.wrap(ctx, op, rec.KeyHash, err)
		}
		if cur, at, err = s.read(ctx, rec.KeyHash); err != nil {
			return store.Reservation{}, s.wrap(ctx, op, rec.KeyHash, err)
		}
		known = true
	}
	return store.Reservation{}, fmt.Errorf("dynamodbstore: %s %s: the record changed %d times while reserving; try again", op, rec.KeyHash, maxRounds)
}

// put writes it whole with the condition cond, dated on the server's
// clock as bounded when the request is sent, and re-dates it if its answer
// shows that it may have been applied later than the slack allows.
func (s *Store) put(ctx context.Context, it *item, cond string, names map[string]string, values map[string]types.AttributeValue) error {
	sent := s.clock.now()
	lo, hi, ok := s.clock.bounds(sent)
	if !ok {
		return errors.New("dynamodbstore: no reading of the server's clock yet")
	}
	it.created, it.updated, it.from = lo, lo, lo
	it.until = hi.Add(writeSlack).Add(it.ttl)
	out, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 &s.table,
		Item:                      it.attrs(),
		ConditionExpression:       &cond,
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	a := s.heard(sent, metadata(out), err)
	if err != nil {
		return err
	}
	s.redate(ctx, it.rec.KeyHash, it.rec.Token, it.version, it.ttl, it.until, a)
	return nil
}

// redate moves the end of the lifetime of the version just written when
// its answer shows that the write may have been applied after the upper
// bound it was dated with: the answer arrived at a.recv, and the write
// was applied before that, so a.hi bounds it. Best effort: a version
// changed since carries a date of its own.
func (s *Store) redate(ctx context.Context, keyHash string, token, version uint64, ttl time.Duration, until time.Time, a answer) {
	if a.hi.IsZero() || !a.hi.Add(ttl).After(until) {
		return
	}
	s.redated.Add(1)
	newUntil := a.hi.Add(ttl)
	_, _ = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           &s.table,
		Key:                 keyOf(keyHash),
		UpdateExpression:    aws.String("SET #until = :until, #exp = :exp, #ver = #ver + :one"),
		ConditionExpression: aws.String("#token = :token AND #ver = :ver"),
		ExpressionAttributeNames: map[string]string{
			"#until": attrUntil, "#exp": TTLAttribute, "#ver": attrVersion, "#token": attrToken,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":until": num(msUp(newUntil)), ":exp": num(expiresEpoch(newUntil)), ":one": num("1"),
			":token": u64(token), ":ver": u64(version),
		},
	})
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, scope, keyHash string) (store.Record, error) {
	const op = "get"
	if err := s.check(ctx, op); err != nil {
		return store.Record{}, err
	}
	if !keyhash.Valid(keyHash) {
		return store.Record{}, fmt.Errorf("dynamodbstore: %s: invalid key hash %q", op, keyHash)
	}
	it, a, err := s.read(ctx, keyHash)
	if err != nil {
		return store.Record{}, s.wrap(ctx, op, keyHash, err)
	}
	// DynamoDB's native TTL deletes late (within days) or not at all
	// (dynalite): the reader judges, on the server's clock.
	if it == nil || it.expired(a.lo) || it.rec.Scope != scope {
		s.watch.Forget(keyHash)
		return store.Record{}, store.ErrNotFound
	}
	return s.record(it, a), nil
}

// Renew implements store.Store: an UpdateItem of the lease and the
// version, conditional on the token and the state. The new version
// restarts every watcher's count; the lifetime stays as it was.
func (s *Store) Renew(ctx context.Context, f store.Fence, lease time.Duration) error {
	const op = "renew"
	if err := s.check(ctx, op); err != nil {
		return err
	}
	if err := s.ensureClock(ctx, f.KeyHash); err != nil {
		return s.wrap(ctx, op, f.KeyHash, err)
	}
	sent := s.clock.now()
	lo, _, _ := s.clock.bounds(sent)
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           &s.table,
		Key:                 keyOf(f.KeyHash),
		UpdateExpression:    aws.String("SET #lease = :lease, #updated = :updated, #ver = #ver + :one"),
		ConditionExpression: aws.String("#token = :token AND #state = :inprogress"),
		ExpressionAttributeNames: map[string]string{
			"#lease": attrLease, "#updated": attrUpdated, "#ver": attrVersion, "#token": attrToken, "#state": attrState,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":lease": num(durMS(lease)), ":updated": num(ms(lo)), ":one": num("1"),
			":token": u64(f.Token), ":inprogress": str(string(store.InProgress)),
		},
	})
	s.heard(sent, metadata(out), err)
	if conditionFailed(err) {
		return fmt.Errorf("dynamodbstore: %s %s: %w", op, f.KeyHash, store.ErrLeaseLost)
	}
	if err != nil {
		return s.wrap(ctx, op, f.KeyHash, err)
	}
	return nil
}

// Complete implements store.Store: an UpdateItem of the state, the value
// and the lifetime, conditional on the token and the state. A value that
// does not fit DynamoDB's 400 KB item is recorded as not stored (see
// notStoredValue and the package doc).
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	const op = "complete"
	if c.State != store.Succeeded && c.State != store.Failed {
		return fmt.Errorf("dynamodbstore: %s: state %q is not succeeded or failed", op, c.State)
	}
	if err := s.check(ctx, op); err != nil {
		return err
	}
	if err := s.ensureClock(ctx, c.KeyHash); err != nil {
		return s.wrap(ctx, op, c.KeyHash, err)
	}
	value, notStored := c.Value, int64(0)
	if len(value) > MaxItemBytes {
		value, notStored = notStoredValue(c.Value), int64(len(c.Value))
	}
	write := newWriteID()
	for {
		err := s.complete(ctx, c, value, notStored, write)
		switch {
		case err == nil:
			return nil
		case notStored == 0 && tooLarge(err):
			// The other attributes left no room for the value: the
			// server is the judge of the item's size.
			value, notStored = notStoredValue(c.Value), int64(len(c.Value))
			continue
		case conditionFailed(err):
			// Our own write, whose answer was lost and whose retry by the
			// SDK found it done, or a lost lease.
			cur, _, rerr := s.read(ctx, c.KeyHash)
			switch {
			case rerr != nil:
				// Which of the two it was is unknown: an error, which
				// may have taken effect, not a lost lease.
				return s.wrap(ctx, op, c.KeyHash, fmt.Errorf("the condition failed, and reading whether the write was this call's own failed too: %w", rerr))
			case cur != nil && cur.rec.Token == c.Token && cur.write == write:
				s.watch.Forget(c.KeyHash)
				return nil
			}
			return fmt.Errorf("dynamodbstore: %s %s: %w", op, c.KeyHash, store.ErrLeaseLost)
		default:
			return s.wrap(ctx, op, c.KeyHash, err)
		}
	}
}

func (s *Store) complete(ctx context.Context, c store.Completion, value []byte, notStored int64, write string) error {
	sent := s.clock.now()
	lo, hi, _ := s.clock.bounds(sent)
	until := hi.Add(writeSlack).Add(c.TTL)
	set := []string{"#state = :state", "#ttl = :ttl", "#from = :from", "#until = :until", "#exp = :exp",
		"#updated = :updated", "#ver = #ver + :one", "#wid = :wid"}
	var remove []string
	names := map[string]string{
		"#state": attrState, "#ttl": attrTTL, "#from": attrFrom, "#until": attrUntil, "#exp": TTLAttribute,
		"#updated": attrUpdated, "#ver": attrVersion, "#wid": attrWrite, "#token": attrToken,
		"#value": attrValue, "#lease": attrLease,
	}
	values := map[string]types.AttributeValue{
		":state": str(string(c.State)), ":ttl": num(durMS(c.TTL)), ":from": num(ms(lo)),
		":until": num(msUp(until)), ":exp": num(expiresEpoch(until)), ":updated": num(ms(lo)),
		":one": num("1"), ":wid": str(write), ":token": u64(c.Token), ":inprogress": str(string(store.InProgress)),
	}
	if len(value) > 0 {
		set = append(set, "#value = :value")
		values[":value"] = &types.AttributeValueMemberB{Value: value}
	} else {
		remove = append(remove, "#value")
	}
	remove = append(remove, "#lease")
	if notStored > 0 {
		set = append(set, "#ns = :ns")
		names["#ns"] = attrNotStored
		values[":ns"] = num(strconv.FormatInt(notStored, 10))
	}
	expr := "SET " + strings.Join(set, ", ") + " REMOVE " + strings.Join(remove, ", ")
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       keyOf(c.KeyHash),
		UpdateExpression:          &expr,
		ConditionExpression:       aws.String("#token = :token AND #state = :inprogress"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	a := s.heard(sent, metadata(out), err)
	if err != nil {
		return err
	}
	s.watch.Forget(c.KeyHash)
	if v, ok := out.Attributes[attrVersion].(*types.AttributeValueMemberN); ok {
		if version, err := strconv.ParseUint(v.Value, 10, 64); err == nil {
			s.redate(ctx, c.KeyHash, c.Token, version, c.TTL, until, a)
		}
	}
	return nil
}

// Release implements store.Store: a DeleteItem conditional on the token
// and on the record not having succeeded.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	const op = "release"
	if err := s.check(ctx, op); err != nil {
		return err
	}
	sent := s.clock.now()
	out, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                &s.table,
		Key:                      keyOf(f.KeyHash),
		ConditionExpression:      aws.String("#token = :token AND #state <> :succeeded"),
		ExpressionAttributeNames: map[string]string{"#token": attrToken, "#state": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":token": u64(f.Token), ":succeeded": str(string(store.Succeeded)),
		},
	})
	s.heard(sent, metadata(out), err)
	if conditionFailed(err) {
		return fmt.Errorf("dynamodbstore: %s %s: %w (no record, another holder, or succeeded)", op, f.KeyHash, store.ErrLeaseLost)
	}
	if err != nil {
		return s.wrap(ctx, op, f.KeyHash, err)
	}
	s.watch.Forget(f.KeyHash)
	return nil
}

// Close implements store.Store: later calls return store.ErrClosed. It
// does not touch the client, which the store does not own.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

func (s *Store) check(ctx context.Context, op string) error {
	if s.closed.Load() {
		return fmt.Errorf("dynamodbstore: %s: %w", op, store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dynamodbstore: %s: %w", op, err)
	}
	return nil
}

// wrap names the operation and makes sure that errors.Is finds the
// context's error when the context ended the call.
func (s *Store) wrap(ctx context.Context, op, keyHash string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("dynamodbstore: %s %s: %w: %w", op, keyHash, cerr, err)
	}
	return fmt.Errorf("dynamodbstore: %s %s: %w", op, keyHash, err)
}

// conditionFailed reports whether a conditional write failed because the
// item is not what it was conditioned on.
func conditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return err != nil && errors.As(err, &ccf)
}

// tooLarge reports whether a write failed because the item would pass
// DynamoDB's 400 KB limit: a ValidationException whose message says so
// ("Item size has exceeded the maximum allowed size", "Item size to
// update has exceeded ...", on AWS and dynalite alike).
func tooLarge(err error) bool {
	var ae smithy.APIError
	if err == nil || !errors.As(err, &ae) || ae.ErrorCode() != "ValidationException" {
		return false
	}
	msg := strings.ToLower(ae.ErrorMessage())
	return strings.Contains(msg, "item size") && strings.Contains(msg, "maximum allowed size")
}
