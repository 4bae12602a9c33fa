package s3store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-dev/idem/store"
	s3store "github.com/idem-dev/idem/store/s3"
	"github.com/idem-dev/idem/store/storetest"
)

// seedNow is where the tests that pin times stop the server's clock
// (frozenClock): the S3 task queue's created_at.
var seedNow = time.Date(2026, 1, 27, 12, 0, 0, 0, time.UTC)

func completion(req store.ReserveRequest, value string) store.Completion {
	return store.Completion{Fence: storetest.FenceOf(req), State: store.Succeeded, Value: []byte(value), TTL: time.Hour}
}

func reserve(t *testing.T, s store.Store, req store.ReserveRequest) store.Reservation {
	t.Helper()
	res, err := s.Reserve(context.Background(), req)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	return res
}

func mustAcquire(t *testing.T, s store.Store, req store.ReserveRequest) {
	t.Helper()
	if res := reserve(t, s, req); !res.Acquired {
		t.Fatalf("Reserve: not acquired; existing %+v", res.Existing)
	}
}

func get(t *testing.T, s store.Store, req store.ReserveRequest) store.Record {
	t.Helper()
	r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return r
}

func wantGone(t *testing.T, s store.Store, req store.ReserveRequest) {
	t.Helper()
	if r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get: %+v, %v; want ErrNotFound", r, err)
	}
}

// watchOver has s's lease watch pass a whole lease of req's record: s
// reads it (the first sighting starts the count), then its stepped watch
// clock moves a lease on.
func watchOver(t *testing.T, s *s3store.Store, c *watchClock, req store.ReserveRequest) {
	t.Helper()
	if r := get(t, s, req); r.State != store.InProgress || r.Stale() {
		t.Fatalf("before the watch: %+v", r)
	}
	c.step(req.Lease)
	if r := get(t, s, req); !r.Stale() {
		t.Fatalf("after a lease watched: lease left %v, want stale", r.LeaseLeft)
	}
}

// rawObject reads an object as it is stored.
func rawObject(t *testing.T, srv *server, key string) (*s3.GetObjectOutput, []byte) {
	t.Helper()
	out, err := srv.client(nil).GetObject(context.Background(), &s3.GetObjectInput{Bucket: &srv.bucket, Key: &key})
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return out, b
}

// TestObjectLayout checks the stored object itself: its name, its JSON
// (the S3 task queue's field names, and the durations the store judges
// by), and the metadata that Cleanup reads.
func TestObjectLayout(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	clock := newFrozenClock(seedNow)
	s := clockStore(t, srv, clock)
	req := storetest.FreshRequest()
	req.Record.Scope = "tenant 7/POST /v1/charges"
	req.Record.KeyHash = store.HashKey(req.Record.Scope, req.Record.Key)
	req.Record.Token = 18446744073709551557 // beyond a double's exact integers
	mustAcquire(t, s, req)
	key := s.ObjectKey(req.Record.Scope, req.Record.KeyHash)
	want := s.Options().Prefix + "idempotency/tenant%207%2FPOST%20%2Fv1%2Fcharges/" + req.Record.KeyHash + ".json"
	if key != want {
		t.Fatalf("object key %q, want %q", key, want)
	}
	_, body := rawObject(t, srv, key)
	var o map[string]any
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatalf("object is not JSON: %v\n%s", err, body)
	}
	if o["lease"] != "1m0s" || o["ttl"] != "1h0m0s" || o["state"] != "in_progress" || o["ttl_from"] != nil {
		t.Fatalf("the reservation's object:\n%s", body)
	}

	clock.add(time.Second)
	if err := s.Complete(context.Background(), completion(req, "\x00\xff{}")); err != nil {
		t.Fatal(err)
	}
	out, body := rawObject(t, srv, key)
	o = nil
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatalf("object is not JSON: %v\n%s", err, body)
	}
	for field, v := range map[string]any{
		"version":    1.0,
		"key":        req.Record.Key,
		"key_hash":   "sha256:" + req.Record.KeyHash,
		"scope":      req.Record.Scope,
		"state":      "succeeded",
		"token":      "18446744073709551557",
		"input_hash": "sha256:fp",
		"binding":    "POST /charges",
		"value":      "AP97fQ==", // base64
		"request_id": req.Record.RequestID,
		// The server's Date when the reservation was written.
		"created_at": "2026-01-27T12:00:00Z",
		"ttl":        "1h0m0s",
	} {
		if o[field] != v {
			t.Errorf("field %s = %#v, want %#v", field, o[field], v)
		}
	}
	// Times written for display: the writer's estimate of the server's
	// clock, in whole seconds like the Date it comes from.
	times := map[string]time.Time{}
	for _, f := range []string{"created_at", "updated_at", "expires_at", "lease_until"} {
		v, _ := o[f].(string)
		at, err := time.Parse(time.RFC3339, v)
		if err != nil || strings.Contains(v, ".") {
			t.Errorf("field %s = %q, want an RFC 3339 time in whole seconds", f, v)
		}
		times[f] = at
	}
	if d := times["expires_at"].Sub(times["updated_at"]); d != time.Hour {
		t.Errorf("expires_at - updated_at = %v, want the TTL", d)
	}
	if len(o) != 15 {
		t.Errorf("object has %d fields, want 15:\n%s", len(o), body)
	}
	if got := out.Metadata["idem-ttl"]; got != "1h0m0s" {
		t.Errorf("metadata idem-ttl = %q", got)
	}
	if got := out.Metadata["idem-expires-at"]; got != o["expires_at"] {
		t.Errorf("metadata idem-expires-at = %q, expires_at %q", got, o["expires_at"])
	}
	if ct := aws.ToString(out.ContentType); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	r := get(t, s, req)
	if r.Token != req.Record.Token || string(r.Value) != "\x00\xff{}" || r.Scope != req.Record.Scope {
		t.Fatalf("read back %+v", r)
	}
	// The record's times are the server's: the completion's write, and
	// the TTL from it.
	if !r.CreatedAt.Equal(seedNow) || !r.UpdatedAt.Equal(seedNow.Add(time.Second)) ||
		!r.ExpiresAt.Equal(seedNow.Add(time.Second+time.Hour)) || !r.ReadAt.Equal(seedNow.Add(time.Second)) {
		t.Fatalf("times created %v, updated %v, expires %v, read %v", r.CreatedAt, r.UpdatedAt, r.ExpiresAt, r.ReadAt)
	}
}

func TestScopeSegment(t *testing.T) {
	t.Parallel()
	for scope, want := range map[string]string{
		"charge_customer":        "charge_customer",
		"queue.default-2":        "queue.default-2",
		"a/b":                    "a%2Fb",
		"%2F":                    "%252F",
		"":                       "~",
		"~":                      "%7E",
		".":                      "%2E",
		"..":                     "%2E%2E",
		"...":                    "%2E%2E%2E",
		"a..b":                   "a..b",
		"päy":                    "p%C3%A4y",
		`tenant "7"/POST`:        "tenant%20%227%22%2FPOST",
		"{tag}:x\n":              "%7Btag%7D%3Ax%0A",
		strings.Repeat("k", 200): strings.Repeat("k", 200),
	} {
		if got := s3store.ScopeSegment(scope); got != want {
			t.Errorf("ScopeSegment(%q) = %q, want %q", scope, got, want)
		}
	}
	long := s3store.ScopeSegment(strings.Repeat("k", 201))
	if !strings.HasPrefix(long, "~") || len(long) != 65 {
		t.Errorf("a 201-byte scope gives %q, want ~ and a SHA-256", long)
	}
	if s3store.ScopeSegment(strings.Repeat("/", 67)) == s3store.ScopeSegment(strings.Repeat("/", 68)) {
		t.Error("two long scopes share a folder")
	}
	// Distinct scopes, distinct folders, none with a '/'.
	seen := map[string]string{}
	for _, sc := range []string{"", "~", "a", "A", "a/b", "a%2Fb", "a b", "a+b", ".", "%2E", "..", "x.y", "x%2Ey"} {
		seg := s3store.ScopeSegment(sc)
		if strings.Contains(seg, "/") {
			t.Errorf("ScopeSegment(%q) = %q contains '/'", sc, seg)
		}
		if other, ok := seen[seg]; ok {
			t.Errorf("scopes %q and %q share folder %q", sc, other, seg)
		}
		seen[seg] = sc
	}
}

// TestLostResponses has the server act on a request whose answer is then
// lost, so that the SDK sends it again and the retry meets the object the
// first try wrote: 412 for a conditional PUT. Each call must recognise its
// own write rather than report a conflict.
func TestLostResponses(t *testing.T) {
	t.Parallel()
	for _, srv := range []*server{realServer(t), fakeServer(t)} {
		t.Run(srv.name, func(t *testing.T) {
			ctx := context.Background()
			f, s := faultyStore(t, srv)
			watch := watched(s)

			create := f.add(&rule{match: ifNoneMatch, times: 1, lose: true})
			req := storetest.FreshRequest()
			if res := reserve(t, s, req); !res.Acquired || res.TookOver {
				t.Fatalf("create: %+v", res)
			}
			if f.hits(create) != 1 {
				t.Fatal("the create's answer was not lost")
			}

			renew := f.add(&rule{match: ifMatch, times: 1, lose: true})
			if err := s.Renew(ctx, storetest.FenceOf(req), 2*time.Minute); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if f.hits(renew) != 1 {
				t.Fatal("the renewal's answer was not lost")
			}

			complete := f.add(&rule{match: ifMatch, times: 1, lose: true})
			if err := s.Complete(ctx, completion(req, "done")); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if f.hits(complete) != 1 {
				t.Fatal("the completion's answer was not lost")
			}
			if r := get(t, s, req); r.State != store.Succeeded || string(r.Value) != "done" {
				t.Fatalf("after Complete: %+v", r)
			}

			// A stale takeover whose answer is lost.
			old := storetest.FreshRequest()
			mustAcquire(t, s, old)
			watchOver(t, s, watch, old)
			tk := storetest.Taker(old)
			take := f.add(&rule{match: ifMatch, times: 1, lose: true})
			if res := reserve(t, s, tk); !res.Acquired || !res.TookOver {
				t.Fatalf("takeover: %+v", res)
			}
			if f.hits(take) != 1 {
				t.Fatal("the takeover's answer was not lost")
			}

			// A release whose answer is lost: the retry deletes nothing.
			del := f.add(&rule{match: isDelete, times: 1, lose: true})
			if err := s.Release(ctx, storetest.FenceOf(tk)); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if f.hits(del) != 1 {
				t.Fatal("the release's answer was not lost")
			}
			wantGone(t, s, old)
		})
	}
}

// TestConflictAnswers feeds the store the answers S3 gives conditional
// writes that meet another writer: 409 ConditionalRequestConflict (AWS,
// two conditional writes at once), 412, and 404 NoSuchKey on a retried
// delete. Each must lead to a re-read, not to an error.
func TestConflictAnswers(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	ctx := context.Background()
	f, s := faultyStore(t, srv)

	// The create meets a 412, but the object is not there when read: the
	// other writer released it meanwhile. Create again.
	f.add(&rule{match: ifNoneMatch, times: 1, answer: s3Error(412, "PreconditionFailed")})
	req := storetest.FreshRequest()
	if res := reserve(t, s, req); !res.Acquired {
		t.Fatalf("Reserve after a 412 on an absent key: %+v", res)
	}
	// The completion meets a 409: read, still ours, write again.
	c409 := f.add(&rule{match: ifMatch, times: 1, answer: s3Error(409, "ConditionalRequestConflict")})
	if err := s.Complete(ctx, completion(req, "v")); err != nil {
		t.Fatalf("Complete after a 409: %v", err)
	}
	if f.hits(c409) != 1 {
		t.Fatal("no 409 was sent")
	}
	// A release whose delete went through but whose retry met 404, as AWS
	// answers a conditional delete of a missing key.
	rel := storetest.FreshRequest()
	mustAcquire(t, s, rel)
	f.add(&rule{match: isDelete, times: 1, lose: true})
	f.add(&rule{match: isDelete, times: 1, answer: s3Error(404, "NoSuchKey")})
	if err := s.Release(ctx, storetest.FenceOf(rel)); err != nil {
		t.Fatalf("Release after a lost delete and a 404: %v", err)
	}
	// Other errors are errors, and leave the record as it was.
	other := storetest.FreshRequest()
	mustAcquire(t, s, other)
	f.add(&rule{match: ifMatch, times: 0, answer: s3Error(403, "AccessDenied")})
	err := s.Complete(ctx, completion(other, "v"))
	if err == nil || errors.Is(err, store.ErrLeaseLost) || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("Complete on a 403: %v", err)
	}
}

// TestHolderMemory: the store remembers the ETag of what its process wrote
// for a reservation, so that a completion needs no read. That memory may be
// stale (another client renewed, or took over): If-Match must catch it.
func TestHolderMemory(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	ctx := context.Background()
	f, a, b := peerStores(t, srv)

	// From memory: Reserve then Complete is two PUTs, no GET.
	gets := f.add(&rule{match: isGet})
	req := storetest.FreshRequest()
	mustAcquire(t, a, req)
	if err := a.Complete(ctx, completion(req, "v")); err != nil {
		t.Fatal(err)
	}
	if n := f.hits(gets); n != 0 {
		t.Fatalf("reserve+complete sent %d GETs, want 0", n)
	}

	// Another client renews the same holder's lease (the ETag changes);
	// the holder's memory is stale, its write fails, it re-reads (one
	// GET) and completes.
	req = storetest.FreshRequest()
	mustAcquire(t, a, req)
	if err := b.Renew(ctx, storetest.FenceOf(req), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Complete(ctx, completion(req, "after renew")); err != nil {
		t.Fatalf("Complete with a stale memory: %v", err)
	}
	if n := f.hits(gets); n != 1 {
		t.Fatalf("the completion over a stale memory sent %d GETs, want 1", n)
	}
	if r := get(t, b, req); string(r.Value) != "after renew" {
		t.Fatalf("record %+v", r)
	}

	// Another client took the key over: the holder is fenced off.
	req = storetest.FreshRequest()
	mustAcquire(t, a, req)
	watchOver(t, b, watched(b), req)
	tk := storetest.Taker(req)
	if res := reserve(t, b, tk); !res.TookOver {
		t.Fatalf("takeover: %+v", res)
	}
	if err := a.Renew(ctx, storetest.FenceOf(req), 3*time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Renew by the old holder: %v", err)
	}
	if err := a.Complete(ctx, completion(req, "stale")); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete by the old holder: %v", err)
	}
	if err := b.Complete(ctx, completion(tk, "fresh")); err != nil {
		t.Fatal(err)
	}
	if r := get(t, a, req); string(r.Value) != "fresh" {
		t.Fatalf("value %q", r.Value)
	}
}

// TestReleaseFencedByServer: between the holder's check of its token and
// its delete, another process takes the stale key over. The delete carries
// If-Match, so the server refuses it and the new holder's record stays.
// gofakes3 ignores If-Match on DELETE and fails this (see the package
// documentation), so it runs on the real server only.
func TestReleaseFencedByServer(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	ctx := context.Background()
	f, a, b := peerStores(t, srv)
	old := storetest.FreshRequest()
	mustAcquire(t, a, old)
	watchOver(t, b, watched(b), old)
	tk := storetest.Taker(old)
	f.add(&rule{match: isDelete, times: 1, before: func(*http.Request) {
		if res, err := b.Reserve(ctx, tk); err != nil || !res.TookOver {
			t.Errorf("takeover during the release: %+v, %v", res, err)
		}
	}})
	if err := a.Release(ctx, storetest.FenceOf(old)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release racing a takeover: %v, want ErrLeaseLost", err)
	}
	if r := get(t, b, tk); r.Token != tk.Record.Token || r.State != store.InProgress {
		t.Fatalf("the new holder's record: %+v", r)
	}
}

// TestCleanupRace: Cleanup reads an expired record, and before its delete
// arrives the key is reserved anew. The delete carries If-Match, so the new
// reservation survives and is not counted.
func TestCleanupRace(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	ctx := context.Background()
	clock := newFrozenClock(seedNow)
	f := &faults{}
	a := newStore(t, srv, srv.clockClient(clock, f))
	b := sibling(t, a, srv.clockClient(clock, nil))
	old := storetest.FreshRequest()
	mustAcquire(t, a, old)
	clock.add(3 * time.Hour)
	fresh := storetest.Taker(old)
	f.add(&rule{match: isDelete, times: 1, before: func(*http.Request) {
		if res, err := b.Reserve(ctx, fresh); err != nil || !res.Acquired || res.TookOver {
			t.Errorf("reserve of the expired key during cleanup: %+v, %v", res, err)
		}
	}})
	n, err := a.Cleanup(ctx, 0)
	if err != nil || n != 0 {
		t.Fatalf("Cleanup: %d, %v; want 0 deleted", n, err)
	}
	if r := get(t, a, fresh); r.Token != fresh.Record.Token {
		t.Fatalf("the new reservation: %+v", r)
	}
}

// TestCleanupLeavesOtherObjects: Cleanup deletes records only, and reads
// in full a record whose metadata is missing.
func TestCleanupLeavesOtherObjects(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	ctx := context.Background()
	clock := newFrozenClock(seedNow)
	c := srv.clockClient(clock, nil)
	s := newStore(t, srv, c)
	prefix := s.Options().Prefix

	expired := storetest.FreshRequest()
	mustAcquire(t, s, expired)
	// The same record copied in by hand, without metadata.
	key := s.ObjectKey(expired.Record.Scope, expired.Record.KeyHash)
	_, body := rawObject(t, srv, key)
	bare := storetest.FreshRequest()
	bareKey := s.ObjectKey(bare.Record.Scope, bare.Record.KeyHash)
	body = bytes.ReplaceAll(body, []byte(expired.Record.KeyHash), []byte(bare.Record.KeyHash))
	put := func(k string, b []byte) {
		t.Helper()
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.bucket, Key: aws.String(k), Body: bytes.NewReader(b)}); err != nil {
			t.Fatal(err)
		}
	}
	put(bareKey, body)
	others := []string{
		prefix + "idempotency/notes.txt",
		prefix + "idempotency/test/" + strings.Repeat("a", 63) + ".json",
		prefix + "idempotency/test/sub/" + strings.Repeat("a", 64) + ".json",
		prefix + "tasks/a/" + expired.Record.KeyHash + ".json",
	}
	for _, k := range others {
		put(k, body)
	}
	clock.add(2 * time.Hour)
	n, err := s.Cleanup(ctx, 0)
	if err != nil || n != 2 {
		t.Fatalf("Cleanup: %d, %v; want 2", n, err)
	}
	if left := listKeys(ctx, c, srv.bucket, prefix); len(left) != len(others) {
		t.Fatalf("left %v, want %v", left, others)
	}
	for _, k := range others {
		if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &srv.bucket, Key: aws.String(k)}); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

// TestContextDeadlineInFlight: a deadline that passes while a request is
// on the wire is reported as such.
func TestContextDeadlineInFlight(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	f, s := faultyStore(t, srv)
	f.add(&rule{match: isPut, before: func(r *http.Request) { <-r.Context().Done() }})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := s.Reserve(ctx, storetest.FreshRequest())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve past its deadline: %v", err)
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	srv := fakeServer(t)
	s := newStore(t, srv, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	req := storetest.FreshRequest()
	ctx := context.Background()
	checks := map[string]error{}
	_, checks["Reserve"] = s.Reserve(ctx, req)
	_, checks["Get"] = s.Get(ctx, "test", req.Record.KeyHash)
	checks["Renew"] = s.Renew(ctx, storetest.FenceOf(req), time.Minute)
	checks["Complete"] = s.Complete(ctx, completion(req, ""))
	checks["Release"] = s.Release(ctx, storetest.FenceOf(req))
	_, checks["Cleanup"] = s.Cleanup(ctx, 0)
	for op, err := range checks {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v", op, err)
		}
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	srv := fakeServer(t)
	if _, err := s3store.New(nil, s3store.Options{Bucket: "b"}); err == nil {
		t.Error("New with a nil client")
	}
	if _, err := s3store.New(srv.client(nil), s3store.Options{}); err == nil {
		t.Error("New without a bucket")
	}
	if _, err := s3store.New(srv.client(nil), s3store.Options{Bucket: "b", Prefix: "/x"}); err == nil {
		t.Error("New with a prefix starting with /")
	}
	s := newStore(t, srv, nil)
	for _, h := range []string{"", "../../etc", strings.Repeat("A", 64), strings.Repeat("a", 63) + "/"} {
		req := storetest.FreshRequest()
		req.Record.KeyHash = h
		if _, err := s.Reserve(context.Background(), req); err == nil {
			t.Errorf("Reserve with key hash %q succeeded", h)
		}
	}
	req := storetest.FreshRequest()
	mustAcquire(t, s, req)
	c := completion(req, "")
	c.State = store.InProgress
	if err := s.Complete(context.Background(), c); err == nil {
		t.Error("Complete to in_progress succeeded")
	}
	// A corrupt object is an error, not an absent record.
	key := s.ObjectKey("test", req.Record.KeyHash)
	for _, body := range []string{
		"{not json",
		strings.Replace(string(rawBody(t, srv, key)), `"ttl": "1h0m0s"`, `"ttl": "an hour"`, 1),
		strings.Replace(string(rawBody(t, srv, key)), `"lease": "1m0s"`, `"lease": "soon"`, 1),
	} {
		if _, err := srv.client(nil).PutObject(context.Background(), &s3.PutObjectInput{Bucket: &srv.bucket, Key: &key, Body: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(context.Background(), "test", req.Record.KeyHash); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get of a corrupt object: %v\n%s", err, body)
		}
	}
}

// rawBody is rawObject's body.
func rawBody(t *testing.T, srv *server, key string) []byte {
	t.Helper()
	_, b := rawObject(t, srv, key)
	return b
}

func TestOptionsPrefix(t *testing.T) {
	t.Parallel()
	srv := fakeServer(t)
	for in, want := range map[string]string{"": "", "billing": "billing/", "a/b/": "a/b/"} {
		s, err := s3store.New(srv.client(nil), s3store.Options{Bucket: "b", Prefix: in})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.ObjectKey("charge_customer", strings.Repeat("0", 64)); got != want+"idempotency/charge_customer/"+strings.Repeat("0", 64)+".json" {
			t.Errorf("prefix %q: object key %q", in, got)
		}
	}
}

// TestCleanupReadsOnlyExpired: Cleanup judges live records by a HEAD (the
// TTL in the metadata, the server's Date and Last-Modified) and downloads
// only the expired ones (twice: an expired verdict is confirmed, see
// TestTornReadNotExpired).
func TestCleanupReadsOnlyExpired(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	clock := newFrozenClock(seedNow)
	f := &faults{}
	s := newStore(t, srv, srv.clockClient(clock, f))
	var live []string
	for i := range 6 {
		req := storetest.FreshRequest()
		if i < 2 {
			req.TTL = time.Minute
		} else {
			live = append(live, req.Record.KeyHash)
		}
		mustAcquire(t, s, req)
	}
	clock.add(30 * time.Minute)
	gets := f.add(&rule{match: isGet})
	liveGets := f.add(&rule{match: func(r *http.Request) bool {
		for _, h := range live {
			if isGet(r) && strings.Contains(r.URL.Path, h) {
				return true
			}
		}
		return false
	}})
	// The rules are tried in order: count live GETs first.
	f.mu.Lock()
	f.rules[len(f.rules)-2], f.rules[len(f.rules)-1] = liveGets, gets
	f.mu.Unlock()
	n, err := s.Cleanup(context.Background(), 0)
	if err != nil || n != 2 {
		t.Fatalf("Cleanup: %d, %v; want 2", n, err)
	}
	if g := f.hits(liveGets); g != 0 {
		t.Fatalf("Cleanup downloaded live records %d times, want 0", g)
	}
	if g := f.hits(gets); g != 4 {
		t.Fatalf("Cleanup sent %d GETs for 2 expired records, want 4", g)
	}
}

// faultyStore is a store of its own on srv whose requests pass through f,
// which the test arms with rules.
func faultyStore(t *testing.T, srv *server) (*faults, *s3store.Store) {
	t.Helper()
	f := &faults{}
	return f, newStore(t, srv, srv.faultClient(f))
}

// peerStores is faultyStore and a second process's store over the same
// objects, whose requests pass no faults: the other replica.
func peerStores(t *testing.T, srv *server) (*faults, *s3store.Store, *s3store.Store) {
	t.Helper()
	f, a := faultyStore(t, srv)
	b := sibling(t, a, srv.client(nil))
	return f, a, b
}
