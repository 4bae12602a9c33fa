package s3store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/idem-dev/idem/store/internal/keyhash"
)

// cleanupWorkers is how many objects Cleanup examines at once: its time is
// spent waiting on round trips, one HEAD per object.
const cleanupWorkers = 8

// Cleanup implements store.Store, at a cost the interface does not ask for:
// S3 has no index by expiry, so Cleanup lists every object under
// idempotency/ (one LIST per 1,000 objects) and HEADs each one to read its
// TTL from the object's metadata, live or not. Expiry is judged on the
// server's clock, by the HEAD's Date against the object's Last-Modified
// plus its TTL. Only objects that have expired are then read in full (a
// GET, whose Date and Last-Modified decide) and deleted with If-Match on
// the version read (a DELETE). The cost therefore grows with all the
// records, not with the expired ones: on a large bucket, let a lifecycle
// rule (LifecycleRule) delete records, set the engine's CleanupInterval to
// -1, and run Cleanup rarely if at all.
//
// An object that changes between the GET and the DELETE (a new reservation
// of the expired key) is left alone and not counted.
func (s *Store) Cleanup(ctx context.Context, limit int) (int, error) {
	const op = "cleanup"
	if err := s.check(ctx, op); err != nil {
		return 0, err
	}
	sw := sweep{s: s, limit: limit}
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: &s.bucket,
		Prefix: aws.String(s.prefix + Dir),
	})
	for pages.HasMorePages() && !sw.full() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return sw.deleted, s.wrap(ctx, op, s.prefix+Dir, err)
		}
		var keys []string
		for _, o := range page.Contents {
			if k := aws.ToString(o.Key); s.isRecord(k) {
				keys = append(keys, k)
			}
		}
		if err := sw.run(ctx, keys); err != nil {
			return sw.deleted, s.wrap(ctx, op, s.prefix+Dir, err)
		}
	}
	return sw.deleted, nil
}

// isRecord reports whether key is named as the store names records, so
// that Cleanup never touches anything else someone keeps under the prefix.
func (s *Store) isRecord(key string) bool {
	rest, ok := strings.CutPrefix(key, s.prefix+Dir)
	if !ok {
		return false
	}
	seg, name, ok := strings.Cut(rest, "/")
	hash, isJSON := strings.CutSuffix(name, ".json")
	return ok && seg != "" && isJSON && keyhash.Valid(hash)
}

// sweep is one Cleanup: it deletes expired records, at most limit of them.
type sweep struct {
	s     *Store
	limit int

	mu      sync.Mutex
	deleted int // guarded by mu
	pending int // deletes under way; guarded by mu
}

func (w *sweep) full() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.limit > 0 && w.deleted >= w.limit
}

// claim takes one of the limit's slots before a delete, so that
// concurrent workers never delete more than limit records.
func (w *sweep) claim() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.limit > 0 && w.deleted+w.pending >= w.limit {
		return false
	}
	w.pending++
	return true
}

func (w *sweep) done(deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending--
	if deleted {
		w.deleted++
	}
}

// run examines keys with cleanupWorkers workers and returns the first error.
func (w *sweep) run(ctx context.Context, keys []string) error {
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	next := make(chan string)
	for range min(cleanupWorkers, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range next {
				if err := w.one(ctx, key); err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
				}
			}
		}()
	}
	for _, key := range keys {
		errMu.Lock()
		stop := firstErr != nil
		errMu.Unlock()
		if stop || w.full() || ctx.Err() != nil {
			break
		}
		next <- key
	}
	close(next)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// one deletes the record under key if it has expired.
func (w *sweep) one(ctx context.Context, key string) error {
	const op = "cleanup"
	s := w.s
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		if notFound(err) {
			return nil
		}
		return err
	}
	// The metadata only spares the download of live records; an object
	// without it (written by hand, or before durations were stored) is
	// read in full.
	if st, ok := fromMetadata(head.Metadata); ok && head.LastModified != nil {
		date, err := serverTime(head.ResultMetadata, op, key)
		if err != nil {
			return err
		}
		if !st.expired(date, *head.LastModified) {
			return nil
		}
	}
	hash := strings.TrimSuffix(key[strings.LastIndexByte(key, '/')+1:], ".json")
	_, _, v, expired, err := s.readJudged(ctx, op, key, hash)
	switch {
	case errors.Is(err, errAbsent):
		return nil
	case err != nil:
		return err
	case !expired:
		return nil // rewritten since the HEAD
	}
	etag := v.etag
	if !w.claim() {
		return nil
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key, IfMatch: aws.String(etag)})
	w.done(err == nil)
	if err != nil && !conflict(err) {
		return err
	}
	return nil
}

// fromMetadata returns what an object's metadata says of its expiry.
func fromMetadata(meta map[string]string) (stored, bool) {
	ttl, err := time.ParseDuration(meta[metaTTL])
	if err != nil {
		return stored{}, false
	}
	st := stored{ttl: ttl}
	if v, ok := meta[metaTTLFrom]; ok {
		if st.ttlFrom, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return stored{}, false
		}
	}
	return st, true
}

// LifecycleRule returns a bucket lifecycle rule that lets S3 delete the
// records of the stores with this prefix by itself (a lifecycle rule on
// idempotency/), so that nobody has to list the bucket:
// objects expire ttl + 1 day after their last write, rounded up to whole
// days. Give the longest TTL of any policy that writes there. S3 counts from
// an object's last modification, and every record is rewritten when its
// call completes with ExpiresAt = completion time + TTL, so the rule never
// deletes a record before it expires; the extra day covers clock skew and
// S3's rounding to midnight UTC. Until S3 gets to it, an expired object is
// absent to readers anyway.
//
// The rule also expires noncurrent versions after a day, for versioned
// buckets, where every conditional rewrite keeps the old version.
//
// PutBucketLifecycleConfiguration replaces a bucket's whole configuration:
// add this rule to the rules the bucket already has.
func LifecycleRule(prefix string, ttl time.Duration) types.LifecycleRule {
	const day = 24 * time.Hour
	days := int32((ttl+day-1)/day) + 1
	dir := Options{Prefix: prefix}.WithDefaults().Prefix + Dir
	id := "idem:" + dir
	if len(id) > 255 { // S3's limit on rule IDs
		id = id[:255]
	}
	return types.LifecycleRule{
		ID:         aws.String(id),
		Status:     types.ExpirationStatusEnabled,
		Filter:     &types.LifecycleRuleFilter{Prefix: aws.String(dir)},
		Expiration: &types.LifecycleExpiration{Days: aws.Int32(days)},
		NoncurrentVersionExpiration: &types.NoncurrentVersionExpiration{
			NoncurrentDays: aws.Int32(1),
		},
	}
}

// LifecycleRule returns the lifecycle rule for this store's prefix; see the
// function LifecycleRule.
func (s *Store) LifecycleRule(ttl time.Duration) types.LifecycleRule {
	return LifecycleRule(s.prefix, ttl)
}
