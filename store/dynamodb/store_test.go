package dynamodbstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-dev/idem/store"
	dynamodbstore "github.com/idem-dev/idem/store/dynamodb"
	"github.com/idem-dev/idem/store/storetest"
)

// seedNow is where the tests that pin times stop the server's clock: ten
// months before this machine's clock, so that a store that read its own
// wall clock anywhere would judge every record wrongly.
var seedNow = time.Date(2026, 1, 27, 12, 0, 0, 0, time.UTC)

// frozenDate is an http.RoundTripper that shows the store a server whose
// clock stands still at a time the test sets: every answer's Date is that
// time. The server does everything else for real.
type frozenDate struct {
	next http.RoundTripper
	mu   sync.Mutex
	now  time.Time // guarded by mu
}

func (c *frozenDate) set(at time.Time) {
	c.mu.Lock()
	c.now = at
	c.mu.Unlock()
}

func (c *frozenDate) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	c.mu.Lock()
	resp.Header.Set("Date", c.now.UTC().Format(http.TimeFormat))
	c.mu.Unlock()
	return resp, nil
}

// target returns the DynamoDB operation a request calls ("PutItem").
func target(req *http.Request) string {
	_, op, _ := strings.Cut(req.Header.Get("X-Amz-Target"), ".")
	return op
}

// body reads a request's body and puts it back.
func body(req *http.Request) []byte {
	if req.Body == nil {
		return nil
	}
	b, _ := io.ReadAll(req.Body)
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// hook is an http.RoundTripper that calls before ahead of the requests
// match picks, and after once their answer arrived (after may delay it,
// or lose it by returning an error).
type hook struct {
	next   http.RoundTripper
	match  func(req *http.Request, body []byte) bool
	before func()
	after  func(*http.Response) error
}

func (h *hook) RoundTrip(req *http.Request) (*http.Response, error) {
	hit := h.match != nil && h.match(req, body(req))
	if hit && h.before != nil {
		h.before()
	}
	resp, err := h.next.RoundTrip(req)
	if hit && err == nil && h.after != nil {
		if aerr := h.after(resp); aerr != nil {
			resp.Body.Close()
			return nil, aerr
		}
	}
	return resp, err
}

// TestServerDate: dynalite dates its answers, and the store's bounds of
// its clock hold this machine's clock (the server's, on loopback) within
// a second and a round trip.
func TestServerDate(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	before := time.Now()
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	lo, hi, ok := dynamodbstore.ServerClockBounds(s)
	after := time.Now()
	if !ok {
		t.Fatal("no Date read from the server's answer")
	}
	// Dates are whole seconds: the server read before..after, truncated.
	if lo.After(after) || hi.Before(before.Truncate(time.Second)) {
		t.Fatalf("bounds %v..%v do not hold the server's clock (%v..%v)", lo, hi, before, after)
	}
	if w := hi.Sub(lo); w > time.Second+after.Sub(before)+10*time.Millisecond {
		t.Fatalf("bounds %v wide after one answer", w)
	}
}

// TestItemLayout checks the item itself: its attributes, the durations
// and bounds the store judges by, the native TTL attribute, a token past
// a double's exact integers.
func TestItemLayout(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	table := s.Options().Table
	req := storetest.FreshRequest()
	req.Record.Token = 18446744073709551557
	mustAcquire(t, s, req)
	m := rawItem(t, table, req.Record.KeyHash)
	for name, want := range map[string]string{"state": "in_progress", "scope": "test", "key": req.Record.Key,
		"fp": "sha256:fp", "binding": "POST /charges", "request_id": req.Record.RequestID} {
		if v, ok := m[name].(*types.AttributeValueMemberS); !ok || v.Value != want {
			t.Fatalf("attribute %s: %#v, want %q", name, m[name], want)
		}
	}
	if got := numAttr(t, m, "token"); got != "18446744073709551557" {
		t.Fatalf("token %s", got)
	}
	if numAttr(t, m, "ver") != "1" || numAttr(t, m, "lease_ms") != "60000" || numAttr(t, m, "ttl_ms") != "3600000" {
		t.Fatalf("ver, lease_ms, ttl_ms: %v %v %v", m["ver"], m["lease_ms"], m["ttl_ms"])
	}
	if _, ok := m["value"]; ok {
		t.Fatal("a reservation has a value")
	}
	from, _ := strconv.ParseInt(numAttr(t, m, "from_ms"), 10, 64)
	until, _ := strconv.ParseInt(numAttr(t, m, "until_ms"), 10, 64)
	expires, _ := strconv.ParseInt(numAttr(t, m, "expires"), 10, 64)
	// until is the upper bound of the write (within a second and the slack
	// of the lower one) plus the TTL.
	if d := time.Duration(until-from) * time.Millisecond; d < time.Hour || d > time.Hour+dynamodbstore.WriteSlack+2*time.Second {
		t.Fatalf("until_ms - from_ms = %v, want the TTL and at most the slack and two seconds more", d)
	}
	if expires*1000 <= until {
		t.Fatalf("native TTL %d s is not after until %d ms", expires, until)
	}

	if err := s.Complete(context.Background(), store.Completion{Fence: storetest.FenceOf(req), State: store.Succeeded,
		Value: []byte("ok"), TTL: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	m = rawItem(t, table, req.Record.KeyHash)
	if v, ok := m["value"].(*types.AttributeValueMemberB); !ok || string(v.Value) != "ok" {
		t.Fatalf("value %#v", m["value"])
	}
	if _, ok := m["lease_ms"]; ok {
		t.Fatal("a completed record keeps its lease")
	}
	if st, ok := m["state"].(*types.AttributeValueMemberS); !ok || st.Value != "succeeded" || numAttr(t, m, "ttl_ms") != "7200000" {
		t.Fatalf("state %v, ttl_ms %v", m["state"], m["ttl_ms"])
	}
}

// TestExpiryOnServerClock: a record's lifetime is counted on the server's
// clock, from an upper bound of its write, whatever this machine's clock
// says (ten months later here). It lives its whole TTL and at most the
// slack, the Date's second and a round trip more.
func TestExpiryOnServerClock(t *testing.T) {
	t.Parallel()
	clock := &frozenDate{next: transport, now: seedNow}
	s := newStore(t, newClient(t, clock))
	ctx := context.Background()
	req := storetest.FreshRequest()
	mustAcquire(t, s, req)
	if err := s.Complete(ctx, store.Completion{Fence: storetest.FenceOf(req), State: store.Succeeded, Value: []byte("v"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	r := get(t, s, req)
	if !r.ExpiresAt.Equal(r.UpdatedAt.Add(time.Hour)) || r.UpdatedAt.Before(seedNow) || r.UpdatedAt.After(seedNow.Add(time.Second)) {
		t.Fatalf("updated %v expires %v; want the server's clock (%v) and an hour", r.UpdatedAt, r.ExpiresAt, seedNow)
	}
	// Never gone early: a TTL after the write's own Date, or a second
	// more, it is there.
	for _, d := range []time.Duration{time.Hour - time.Minute, time.Hour, time.Hour + time.Second} {
		clock.set(seedNow.Add(d))
		get(t, s, req)
	}
	if n, err := s.CountExpired(ctx); err != nil || n != 0 {
		t.Fatalf("CountExpired before the end: %d, %v", n, err)
	}
	// Gone once the slack and the Date's second have passed too.
	clock.set(seedNow.Add(time.Hour + dynamodbstore.WriteSlack + 2*time.Second))
	if r, err := s.Get(ctx, req.Record.Scope, req.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after the lifetime: %+v, %v; want ErrNotFound", r, err)
	}
	if n, err := s.CountExpired(ctx); err != nil || n != 1 {
		t.Fatalf("CountExpired: %d, %v; want 1", n, err)
	}
	// Absent to Reserve too, with any fingerprint: a new record, not a
	// takeover.
	again := storetest.Taker(req)
	again.Record.Fingerprint = "sha256:other"
	res := reserve(t, s, again)
	if !res.Acquired || res.TookOver {
		t.Fatalf("reserve over an expired record: %+v", res)
	}
	if n, err := s.Cleanup(ctx, 0); err != nil || n != 0 {
		t.Fatalf("Cleanup after the key was reserved again: %d, %v; want 0", n, err)
	}
}

// TestLeaseObserveAndWait: a lease is over for a client once that client
// has watched the same version of the record for a whole lease, on its
// own monotonic clock; a renewal (a new version) starts the count again.
func TestLeaseObserveAndWait(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	p := storeOn(t, s, newClient(t, peerTransport))
	watch := watched(p)
	ctx := context.Background()
	req := storetest.FreshRequest()
	req.Lease = 10 * time.Second
	mustAcquire(t, s, req)
	if r := get(t, p, req); r.LeaseLeft != req.Lease {
		t.Fatalf("first sighting: lease left %v, want %v", r.LeaseLeft, req.Lease)
	}
	watch.step(9 * time.Second)
	if r := get(t, p, req); r.LeaseLeft != time.Second || r.Stale() {
		t.Fatalf("9 s watched: lease left %v", r.LeaseLeft)
	}
	if res := reserve(t, p, storetest.Taker(req)); res.Acquired {
		t.Fatal("taken over before a whole lease was watched")
	}
	if err := s.Renew(ctx, storetest.FenceOf(req), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := get(t, p, req); r.LeaseLeft != 5*time.Second {
		t.Fatalf("after a renewal: lease left %v, want the new lease 5s", r.LeaseLeft)
	}
	watch.step(5 * time.Second)
	r := get(t, p, req)
	if !r.Stale() || r.Token != req.Record.Token {
		t.Fatalf("a whole lease watched: %+v", r)
	}
	tk := storetest.Taker(req)
	if res := reserve(t, p, tk); !res.Acquired || !res.TookOver {
		t.Fatalf("takeover of a stale record: %+v", res)
	}
	if err := s.Complete(ctx, store.Completion{Fence: storetest.FenceOf(req), State: store.Succeeded, TTL: time.Hour}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("the old holder's Complete: %v, want ErrLeaseLost", err)
	}
	if r := get(t, s, req); r.Token != tk.Record.Token || r.State != store.InProgress {
		t.Fatalf("after the takeover: %+v", r)
	}
}

// TestTakeoverLosesToRenewal: a renewal that lands between a taker's read
// (which judged the lease over) and its conditional write wins: the write
// is conditional on the version read, so it fails, and the taker reads
// the renewed record, live.
func TestTakeoverLosesToRenewal(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := context.Background()
	req := storetest.FreshRequest()
	req.Lease = 10 * time.Second
	mustAcquire(t, s, req)
	var renewed atomic.Int32
	h := &hook{next: peerTransport,
		match: func(r *http.Request, b []byte) bool {
			return target(r) == "PutItem" && bytes.Contains(b, []byte("#token = :token")) && renewed.Load() == 0
		},
		before: func() {
			renewed.Add(1)
			if err := s.Renew(ctx, storetest.FenceOf(req), 10*time.Second); err != nil {
				t.Errorf("Renew: %v", err)
			}
		},
	}
	p := storeOn(t, s, newClient(t, h))
	watch := watched(p)
	get(t, p, req)
	watch.step(req.Lease)
	res := reserve(t, p, storetest.Taker(req))
	if renewed.Load() != 1 {
		t.Fatalf("the takeover's write was not tried (%d renewals)", renewed.Load())
	}
	if res.Acquired || res.Existing.Token != req.Record.Token || res.Existing.Stale() {
		t.Fatalf("takeover against a renewal: %+v", res)
	}
	if err := s.Complete(ctx, store.Completion{Fence: storetest.FenceOf(req), State: store.Succeeded, Value: []byte("once"), TTL: time.Hour}); err != nil {
		t.Fatalf("the holder's Complete: %v", err)
	}
}

// TestLateAnswerRedated: a write whose answer comes back later than the
// slack after it was sent may have been applied that late (an SDK retry,
// a slow network): the store moves its recorded end of life to the upper
// bound of the server's clock when the answer arrived, so that the record
// is never judged expired early.
func TestLateAnswerRedated(t *testing.T) {
	t.Parallel()
	delay := dynamodbstore.WriteSlack + 1500*time.Millisecond
	var delayed atomic.Int32
	h := &hook{next: transport,
		match: func(r *http.Request, _ []byte) bool { return target(r) == "PutItem" && delayed.Load() == 0 },
		after: func(*http.Response) error {
			delayed.Add(1)
			time.Sleep(delay)
			return nil
		},
	}
	s := newStore(t, newClient(t, h))
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := storetest.FreshRequest()
	mustAcquire(t, s, req)
	answered := time.Now()
	if dynamodbstore.Redated(s) != 1 {
		t.Fatalf("%d writes re-dated, want 1", dynamodbstore.Redated(s))
	}
	m := rawItem(t, s.Options().Table, req.Record.KeyHash)
	until, _ := strconv.ParseInt(numAttr(t, m, "until_ms"), 10, 64)
	// dynalite's clock is this machine's: the write's answer arrived at
	// answered at the latest, so the lifetime runs from no earlier.
	if min := answered.Add(req.TTL).UnixMilli(); until < min-int64(time.Second/time.Millisecond) {
		t.Fatalf("until_ms %d, want no earlier than the answer's arrival plus the TTL (%d)", until, min)
	}
	if numAttr(t, m, "ver") != "2" {
		t.Fatalf("ver %v, want 2 (the reservation and its re-dating)", m["ver"])
	}
	// A write answered in time is not re-dated.
	mustAcquire(t, s, storetest.FreshRequest())
	if dynamodbstore.Redated(s) != 1 {
		t.Fatalf("%d writes re-dated, want still 1", dynamodbstore.Redated(s))
	}
}

// TestLostAnswerOwnWrite: a completion whose answer is lost after the
// server applied it is retried by the SDK, which finds the record changed
// and fails its condition; the store recognises its own write by its ID
// and reports success, not a lost lease (the engine would otherwise not
// recognise a value recorded as not stored).
func TestLostAnswerOwnWrite(t *testing.T) {
	t.Parallel()
	var lost atomic.Int32
	h := &hook{next: transport,
		match: func(r *http.Request, _ []byte) bool { return target(r) == "UpdateItem" && lost.Load() == 0 },
		after: func(*http.Response) error {
			lost.Add(1)
			return &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		},
	}
	s := newStore(t, newClient(t, h))
	req := storetest.FreshRequest()
	mustAcquire(t, s, req)
	big := make([]byte, dynamodbstore.MaxItemBytes+1)
	if err := s.Complete(context.Background(), store.Completion{Fence: storetest.FenceOf(req), State: store.Succeeded, Value: big, TTL: time.Hour}); err != nil {
		t.Fatalf("Complete whose first answer was lost: %v", err)
	}
	if lost.Load() != 1 {
		t.Fatalf("%d answers lost, want 1", lost.Load())
	}
	if r := get(t, s, req); r.State != store.Succeeded || len(r.Value) != 0 {
		t.Fatalf("record %s with %d bytes, want succeeded and not stored", r.State, len(r.Value))
	}
	// Another holder's completion is still a lost lease.
	if err := s.Complete(context.Background(), store.Completion{Fence: storetest.FenceOf(storetest.Taker(req)), State: store.Succeeded, TTL: time.Hour}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a stranger's Complete: %v", err)
	}
}

// TestValuePastTheItemLimit: a value that fits no item is recorded as not
// stored, whether the store sees it is too large (over 400 KB) or the
// server says so (the other attributes took the room); one that fits is
// kept whole.
func TestValuePastTheItemLimit(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	table := s.Options().Table
	for _, n := range []int{dynamodbstore.MaxValueBytes, dynamodbstore.MaxItemBytes - 100, dynamodbstore.MaxItemBytes + 1, 4 << 20} {
		req := storetest.FreshRequest()
		mustAcquire(t, s, req)
		v := bytes.Repeat([]byte{'x'}, n)
		if err := s.Complete(context.Background(), store.Completion{Fence: storetest.FenceOf(req), State: store.Succeeded, Value: v, TTL: time.Hour}); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		r := get(t, s, req)
		m := rawItem(t, table, req.Record.KeyHash)
		switch {
		case n <= dynamodbstore.MaxValueBytes:
			if !bytes.Equal(r.Value, v) {
				t.Fatalf("%d bytes: value of %d bytes came back", n, len(r.Value))
			}
		default:
			if len(r.Value) != 0 || numAttr(t, m, "not_stored") != strconv.Itoa(n) {
				t.Fatalf("%d bytes: %d came back, not_stored %v", n, len(r.Value), m["not_stored"])
			}
		}
	}
}

// TestMigrate: Migrate creates the table and turns native TTL on where it
// can; on dynalite, which has no UpdateTimeToLive, that is a warning.
// Again, it finds the table and does nothing; a table with another key is
// refused, and a store's Check names the fix for a missing table.
func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, nil)
	table := "idem-migrate-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s, err := dynamodbstore.New(c, dynamodbstore.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); !errors.Is(err, dynamodbstore.ErrTableMissing) || !strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("Check of a missing table: %v", err)
	}
	rep, err := dynamodbstore.Migrate(ctx, c, table)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &table}) })
	if !rep.Created || rep.TTL != "" || rep.TTLWarning == nil || !strings.Contains(rep.TTLWarning.Error(), "UnknownOperationException") {
		t.Fatalf("first migrate: %+v", rep)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after migrate: %v", err)
	}
	if rep, err := dynamodbstore.Migrate(ctx, c, table); err != nil || rep.Created {
		t.Fatalf("second migrate: %+v, %v", rep, err)
	}
	mustAcquire(t, s, storetest.FreshRequest())

	other := table + "-other"
	if _, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &other,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &other}) })
	if _, err := dynamodbstore.Migrate(ctx, c, other); !errors.Is(err, dynamodbstore.ErrTableShape) {
		t.Fatalf("migrate of a table with another key: %v", err)
	}
	if _, err := dynamodbstore.New(c, dynamodbstore.Options{Table: "x"}); err == nil {
		t.Fatal("a table name of one letter was accepted")
	}
}
