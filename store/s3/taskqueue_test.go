package s3store_test

// The S3 task queue: idempotent submit for an S3-only task queue. The queue below is
// the seed's, reduced to what idempotency touches: submit(task_type, input,
// key) creates tasks/{shard}/{task_id}.json and returns the task ID, through
// the engine over the S3 store, so that the idempotency record lives at
// idempotency/{scope}/{key_hash}.json next to the tasks.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/store"
	s3store "github.com/idem-dev/idem/store/s3"
)

// taskQueue is the task queue scenario's queue: tasks and idempotency records in one
// bucket, under one prefix.
type taskQueue struct {
	client *s3.Client
	bucket string
	prefix string
	store  *s3store.Store
	eng    *idem.Engine
	// now is the queue's clock, which dates its tasks; in these tests the
	// server's (frozen) clock, so that the seed's 30 days pass at once.
	now func() time.Time
	// created counts the task objects written, to prove that a duplicate
	// submit created nothing.
	created atomic.Int32
	// failNext makes the next task creation fail after the idempotency
	// record was created (the seed's first failure mode).
	failNext atomic.Bool
	// afterTask, when set, runs after the task is written and before the
	// record is completed.
	afterTask func()
}

// newTaskQueue returns a queue whose server's clock stands at the seed's
// created_at, 2026-01-27T12:00:00Z, until the test moves it (clock).
func newTaskQueue(t *testing.T, srv *server) (*taskQueue, *frozenClock) {
	t.Helper()
	clock := newFrozenClock(seedNow)
	q := &taskQueue{client: srv.clockClient(clock, nil), bucket: srv.bucket, now: clock.Now}
	q.store = newStore(t, srv, q.client)
	q.prefix = q.store.Options().Prefix
	// The seed's 30-day retention; cleanup left to the lifecycle rule.
	// The engine's own clock only dates what it reports.
	q.eng = idem.New(q.store, idem.Policy{TTL: 30 * 24 * time.Hour, CleanupInterval: -1}, idem.WithClock(clock.Now))
	return q, clock
}

// submitted is what the idempotency operation returns and the record
// keeps: the seed's task_id and task_key.
type submitted struct {
	TaskID  string `json:"task_id"`
	TaskKey string `json:"task_key"`
}

// submitOpts choose the scope: the task type (default), a queue, or a
// custom string (the task queue's three scopes).
type submitOpts struct {
	Queue string
	Scope string
}

// submit is the seed's queue.submit(task_type, input, idempotency_key=...).
// The input hash is the fingerprint; the task type is the binding, so that
// under a queue scope one key cannot name two kinds of task.
func (q *taskQueue) submit(ctx context.Context, taskType string, input any, key string, opts submitOpts) (string, idem.Result, error) {
	scope := taskType
	switch {
	case opts.Scope != "":
		scope = opts.Scope
	case opts.Queue != "":
		scope = "queue:" + opts.Queue
	}
	inputHash, err := idem.HashJSON(input)
	if err != nil {
		return "", idem.Result{}, err
	}
	res, err := q.eng.Do(ctx, idem.Call{Scope: scope, Key: key, Fingerprint: inputHash, Binding: taskType},
		func(ctx context.Context) ([]byte, error) {
			if q.failNext.CompareAndSwap(true, false) {
				return nil, errors.New("task creation failed")
			}
			// The task is named by the record's identity, the same for a
			// submitter that takes the key over after this one died: it
			// finds this one's task instead of creating a second. The
			// task carries the record's expiry: a task left from a use of
			// the key whose record expired is replaced.
			h, _ := idem.HoldFrom(ctx)
			id := h.ID
			now := q.now()
			taskKey := q.prefix + "tasks/" + id[:1] + "/" + id + ".json"
			body, _ := json.Marshal(task{TaskID: id, TaskType: taskType, Input: input, ExpiresAt: now.Add(q.eng.Policy().TTL)})
			// Tasks are created with If-None-Match too, as the seed says.
			_, created, err := q.store.CreateOnce(ctx, taskKey, body, func(old []byte) bool {
				var t task
				return json.Unmarshal(old, &t) == nil && !now.Before(t.ExpiresAt)
			})
			if err != nil {
				return nil, err
			}
			if created {
				q.created.Add(1)
			}
			if q.afterTask != nil {
				q.afterTask()
			}
			return json.Marshal(submitted{TaskID: id, TaskKey: taskKey})
		})
	if err != nil {
		return "", res, err
	}
	var s submitted
	if err := json.Unmarshal(res.Value, &s); err != nil {
		return "", res, fmt.Errorf("stored value %q: %w", res.Value, err)
	}
	return s.TaskID, res, nil
}

// task is a task object's body.
type task struct {
	TaskID    string    `json:"task_id"`
	TaskType  string    `json:"task_type"`
	Input     any       `json:"input"`
	ExpiresAt time.Time `json:"expires_at"`
}

// The seed's example input.
var chargeInput = map[string]any{"order_id": "ORD-123", "amount_cents": 4200, "currency": "EUR"}

func TestTaskQueueSameKeySameTask(t *testing.T) {
	t.Parallel()
	q, _ := newTaskQueue(t, realServer(t))
	ctx := context.Background()
	id1, res1, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if res1.Replayed {
		t.Fatal("the first submit was a replay")
	}
	// The producer retries; the input is the same JSON in another order.
	retry := map[string]any{"currency": "EUR", "amount_cents": 4200, "order_id": "ORD-123"}
	id2, res2, err := q.submit(ctx, "charge_customer", retry, "charge-ORD-123", submitOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if id2 != id1 || !res2.Replayed {
		t.Fatalf("retry got task %s (replayed %v), want %s", id2, res2.Replayed, id1)
	}
	if n := q.created.Load(); n != 1 {
		t.Fatalf("%d tasks created, want 1", n)
	}
	if tasks := listKeys(ctx, q.client, q.bucket, q.prefix+"tasks/"); len(tasks) != 1 || !strings.Contains(tasks[0], id1) {
		t.Fatalf("task objects %v", tasks)
	}
}

// TestTaskQueueConcurrentSubmits: producers on two clients retry at once;
// all get the one task.
func TestTaskQueueConcurrentSubmits(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	q, clock := newTaskQueue(t, srv)
	peerStore := sibling(t, q.store, srv.clockClient(clock, nil))
	peer := idem.New(peerStore, q.eng.Policy(), idem.WithClock(clock.Now))
	ids := make([]string, 16)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half go through the other client, as another producer would.
			qq := q
			if i%2 == 1 {
				qq = &taskQueue{client: q.client, bucket: q.bucket, prefix: q.prefix, store: peerStore, eng: peer, now: q.now}
			}
			id, _, err := qq.submit(context.Background(), "charge_customer", chargeInput, "charge-ORD-123", submitOpts{})
			if errors.Is(err, idem.ErrInProgress) {
				id = "in progress"
			} else if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	tasks := listKeys(context.Background(), q.client, q.bucket, q.prefix+"tasks/")
	if len(tasks) != 1 {
		t.Fatalf("%d tasks created by 16 concurrent submits: %v", len(tasks), tasks)
	}
	for i, id := range ids {
		if id != "in progress" && !strings.Contains(tasks[0], id) {
			t.Errorf("submit %d got task %q, want the one in %s", i, id, tasks[0])
		}
	}
}

func TestTaskQueueInputHashConflict(t *testing.T) {
	t.Parallel()
	q, _ := newTaskQueue(t, realServer(t))
	ctx := context.Background()
	if _, _, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{}); err != nil {
		t.Fatal(err)
	}
	other := map[string]any{"order_id": "ORD-123", "amount_cents": 9900, "currency": "EUR"}
	_, _, err := q.submit(ctx, "charge_customer", other, "charge-ORD-123", submitOpts{})
	// The seed's IdempotencyConflict.
	if !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("different input hash: %v, want ErrFingerprintMismatch", err)
	}
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || ce.Type != idem.ConflictPayloadMismatch {
		t.Fatalf("error %v is not a payload-mismatch conflict", err)
	}
	if n := q.created.Load(); n != 1 {
		t.Fatalf("%d tasks created, want 1", n)
	}
}

func TestTaskQueueScopes(t *testing.T) {
	t.Parallel()
	q, _ := newTaskQueue(t, realServer(t))
	ctx := context.Background()
	const key = "charge-ORD-123"
	submit := func(taskType string, opts submitOpts) string {
		t.Helper()
		id, _, err := q.submit(ctx, taskType, chargeInput, key, opts)
		if err != nil {
			t.Fatalf("submit %s %+v: %v", taskType, opts, err)
		}
		return id
	}
	// Default scope, the task type: one key, two task types, two tasks.
	charge := submit("charge_customer", submitOpts{})
	email := submit("send_receipt", submitOpts{})
	if charge == email {
		t.Fatal("two task types share a task under the default scope")
	}
	// Queue scope: the key is global to the queue. The same task type
	// gets the same task; another task type is a key reused.
	inQueue := submit("charge_customer", submitOpts{Queue: "payments"})
	if inQueue == charge {
		t.Fatal("the queue scope shares the task type's record")
	}
	if again := submit("charge_customer", submitOpts{Queue: "payments"}); again != inQueue {
		t.Fatalf("queue scope: %s then %s", inQueue, again)
	}
	if _, _, err := q.submit(ctx, "send_receipt", chargeInput, key, submitOpts{Queue: "payments"}); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("queue scope, another task type: %v, want ErrKeyReused", err)
	}
	// A custom scope string, e.g. a tenant.
	custom := submit("charge_customer", submitOpts{Scope: "tenant-42/billing"})
	if custom == charge || custom == inQueue {
		t.Fatal("the custom scope shares a record")
	}
	if again := submit("charge_customer", submitOpts{Scope: "tenant-42/billing"}); again != custom {
		t.Fatalf("custom scope: %s then %s", custom, again)
	}
	var names []string
	for _, k := range listKeys(ctx, q.client, q.bucket, q.prefix+"idempotency/") {
		names = append(names, strings.TrimPrefix(k, q.prefix+"idempotency/"))
	}
	sort.Strings(names)
	want := []string{
		"charge_customer/" + sha256hex("charge_customer:"+key) + ".json",
		"queue%3Apayments/" + sha256hex("queue:payments:"+key) + ".json",
		"send_receipt/" + sha256hex("send_receipt:"+key) + ".json",
		"tenant-42%2Fbilling/" + sha256hex("tenant-42/billing:"+key) + ".json",
	}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("records:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestTaskQueueRecord checks the object against the seed's example: its name
// and its fields, with created_at 2026-01-27T12:00:00Z (the server's
// clock when the record was made) and expires_at 30 days later.
func TestTaskQueueRecord(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	q, _ := newTaskQueue(t, srv)
	ctx := context.Background()
	id, _, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{})
	if err != nil {
		t.Fatal(err)
	}
	name := "idempotency/charge_customer/" + sha256hex("charge_customer:charge-ORD-123") + ".json"
	if got := q.store.ObjectKey("charge_customer", store.HashKey("charge_customer", "charge-ORD-123")); got != q.prefix+name {
		t.Fatalf("ObjectKey = %q, want %q", got, q.prefix+name)
	}
	_, body := rawObject(t, srv, q.prefix+name)
	var rec struct {
		Key        string    `json:"key"`
		KeyHash    string    `json:"key_hash"`
		Scope      string    `json:"scope"`
		State      string    `json:"state"`
		Binding    string    `json:"binding"`
		InputHash  string    `json:"input_hash"`
		Value      []byte    `json:"value"`
		CreatedAt  time.Time `json:"created_at"`
		UpdatedAt  time.Time `json:"updated_at"`
		ExpiresAt  time.Time `json:"expires_at"`
		LeaseUntil time.Time `json:"lease_until"`
		TTL        string    `json:"ttl"`
	}
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatal(err)
	}
	inputHash, _ := idem.HashJSON(chargeInput)
	var value submitted
	_ = json.Unmarshal(rec.Value, &value)
	switch {
	case rec.Key != "charge-ORD-123",
		rec.KeyHash != "sha256:"+sha256hex("charge_customer:charge-ORD-123"),
		rec.Scope != "charge_customer",
		rec.Binding != "charge_customer",
		rec.State != "succeeded", // the seed's "ready"
		rec.InputHash != inputHash,
		value.TaskID != id,
		value.TaskKey != q.prefix+"tasks/"+id[:1]+"/"+id+".json",
		rec.TTL != "720h0m0s",
		!rec.CreatedAt.Equal(seedNow),
		// Written for display from the writer's estimate of the server's
		// clock at the completion, a moment after the creation.
		rec.ExpiresAt.Sub(rec.UpdatedAt) != 30*24*time.Hour,
		rec.UpdatedAt.Before(seedNow) || rec.UpdatedAt.After(seedNow.Add(time.Minute)):
		t.Fatalf("record:\n%s", body)
	}
	if !bytes.Contains(body, []byte(`"created_at": "2026-01-27T12:00:00Z"`)) || !bytes.Contains(body, []byte(`"expires_at": "2026-02-26T12:`)) {
		t.Fatalf("times are not written as in the seed:\n%s", body)
	}
	// What the store reads back is on the server's clock, to the second.
	r, err := q.store.Get(ctx, "charge_customer", store.HashKey("charge_customer", "charge-ORD-123"))
	if err != nil || !r.CreatedAt.Equal(seedNow) || !r.ExpiresAt.Equal(time.Date(2026, 2, 26, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("the record read back: %+v, %v", r, err)
	}
}

// TestTaskQueueExpiredOverwrite: "If record expired and still present, it is
// treated as stale and can be overwritten with CAS." After 30 days the key
// makes a new task (under the same name, the record's identity, which is
// derived from the key), and of many producers doing so at once one writes.
// The 30 days pass on the server's clock: a producer's own clock has no
// say.
func TestTaskQueueExpiredOverwrite(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	q, clock := newTaskQueue(t, srv)
	ctx := context.Background()
	first, _, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{})
	if err != nil {
		t.Fatal(err)
	}
	// Live to the last second of its 30 days, and through the second the
	// server's Date cannot tell apart from it (Date has whole seconds).
	for _, at := range []time.Time{
		time.Date(2026, 2, 26, 11, 59, 59, 0, time.UTC),
		time.Date(2026, 2, 26, 12, 0, 0, 0, time.UTC),
	} {
		clock.set(at)
		if id, res, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{}); err != nil || id != first || !res.Replayed {
			t.Fatalf("at %v: %s, %+v, %v", at, id, res, err)
		}
	}
	// Expired but still present (no lifecycle rule has run).
	clock.set(time.Date(2026, 2, 26, 12, 0, 1, 0, time.UTC))
	name := q.store.ObjectKey("charge_customer", store.HashKey("charge_customer", "charge-ORD-123"))
	if _, err := q.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &q.bucket, Key: &name}); err != nil {
		t.Fatalf("the expired record is gone: %v", err)
	}
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, _, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{})
			if err != nil && !errors.Is(err, idem.ErrInProgress) {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	if n := q.created.Load(); n != 2 {
		t.Fatalf("%d tasks created, want 2: one before expiry, one after", n)
	}
	id, res, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{})
	// The task keeps its name, the record's identity, but it is a new
	// task: its object was replaced, and carries the new record's expiry.
	if err != nil || id != first || !res.Replayed {
		t.Fatalf("after the overwrite: %s (first %s), %+v, %v", id, first, res, err)
	}
	taskKey := q.prefix + "tasks/" + id[:1] + "/" + id + ".json"
	out, err := q.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &q.bucket, Key: &taskKey})
	if err != nil {
		t.Fatal(err)
	}
	var tk task
	err = json.NewDecoder(out.Body).Decode(&tk)
	out.Body.Close()
	if err != nil || !tk.ExpiresAt.Equal(q.now().Add(30*24*time.Hour)) {
		t.Fatalf("the task after the key's reuse: %+v, %v; want a new one", tk, err)
	}
	for i, got := range ids {
		if got != "" && got != id {
			t.Errorf("producer %d got %s, want %s", i, got, id)
		}
	}
	r, err := q.store.Get(ctx, "charge_customer", store.HashKey("charge_customer", "charge-ORD-123"))
	if err != nil || !r.CreatedAt.Equal(q.now()) {
		t.Fatalf("the overwritten record: %+v, %v", r, err)
	}
}

// TestTaskQueueTwoPhase maps the seed's optional two-phase status onto the
// record's states: creating is in_progress, ready is succeeded. A submitter
// that crashed between the record and the task leaves "creating" behind;
// retries are told it is in progress until its lease runs out, and then
// one of them takes it over and creates the task. A failed task creation
// releases the key, so that the next submit creates the task.
//
// S3 has no clock for leases: the retrying producer counts the crashed
// submitter's lease itself, from when it first saw the record (its lease
// watch, stepped here instead of slept).
func TestTaskQueueTwoPhase(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	q, _ := newTaskQueue(t, srv)
	watch := watched(q.store)
	ctx := context.Background()
	inputHash, _ := idem.HashJSON(chargeInput)

	// The crashed submitter: its record, as the engine writes it, and
	// nothing else.
	crashed := store.ReserveRequest{
		Record: store.Record{
			KeyHash: store.HashKey("charge_customer", "charge-ORD-123"), Scope: "charge_customer", Key: "charge-ORD-123",
			Fingerprint: inputHash, Binding: "charge_customer", State: store.InProgress, Token: 7,
		},
		Lease: idem.DefaultLease, TTL: 30 * 24 * time.Hour,
	}
	mustAcquire(t, q.store, crashed)

	_, _, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{})
	if !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("while creating: %v, want ErrInProgress", err)
	}
	watch.step(idem.DefaultLease - time.Second)
	if _, _, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{}); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("a second before the end of the lease: %v, want ErrInProgress", err)
	}
	watch.step(2 * time.Second)
	id, res, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{})
	if err != nil || !res.TookOver || res.Replayed {
		t.Fatalf("after the lease: %s, %+v, %v; want a takeover", id, res, err)
	}
	if again, res, err := q.submit(ctx, "charge_customer", chargeInput, "charge-ORD-123", submitOpts{}); err != nil || again != id || !res.Replayed {
		t.Fatalf("ready: %s, %+v, %v", again, res, err)
	}
	// The crashed submitter wakes up: fenced off.
	if err := q.store.Complete(ctx, completion(crashed, "late")); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("the crashed submitter's completion: %v", err)
	}

	// Task creation fails after the record was created: the key is
	// released, and the retry creates the task.
	q.failNext.Store(true)
	if _, _, err := q.submit(ctx, "charge_customer", chargeInput, "refund-ORD-123", submitOpts{}); err == nil {
		t.Fatal("the failed creation succeeded")
	}
	if _, err := q.store.Get(ctx, "charge_customer", store.HashKey("charge_customer", "refund-ORD-123")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record after a failed creation: %v, want none", err)
	}
	if _, res, err := q.submit(ctx, "charge_customer", chargeInput, "refund-ORD-123", submitOpts{}); err != nil || res.Replayed {
		t.Fatalf("retry after a failed creation: %+v, %v", res, err)
	}
	if n := q.created.Load(); n != 2 {
		t.Fatalf("%d tasks created, want 2", n)
	}
}
