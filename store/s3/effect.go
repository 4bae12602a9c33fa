package s3store

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// An S3 bucket has no transactions, so an operation cannot commit its own
// writes with its record's completion as it can on PostgreSQL. What it can
// do is name them by the record's stable identity (idem.RecordID, the same
// for every holder of a key) and create them only if absent: then a holder
// that takes a key over after its predecessor died between writing and
// completing finds that write instead of making a second one.

// CreateOnce creates the object key (a full object key, in the store's
// bucket) with body, unless it exists, with If-None-Match: *. It returns
// what the object holds afterwards: body and true when this call created
// it, or the existing object and false. Of any number of concurrent calls,
// one creates; the others read its body.
//
// replace, when not nil, tells an existing object that is a leftover of an
// earlier use of the key (one whose record expired, so that the key now
// names new work) from the write of a predecessor holder. A leftover is
// overwritten, conditioned on its ETag, and created is true.
func (s *Store) CreateOnce(ctx context.Context, key string, body []byte, replace func(existing []byte) bool) (got []byte, created bool, err error) {
	if err := s.check(ctx, "create"); err != nil {
		return nil, false, err
	}
	ifNoneMatch, ifMatch := aws.String("*"), (*string)(nil)
	for range 8 {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(body), IfNoneMatch: ifNoneMatch, IfMatch: ifMatch,
		})
		if err == nil {
			return body, true, nil
		}
		if !conflict(err) {
			return nil, false, s.wrap(ctx, "create", key, err)
		}
		out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
		if notFound(err) {
			ifNoneMatch, ifMatch = aws.String("*"), nil
			continue // deleted since: try to create it again
		}
		if err != nil {
			return nil, false, s.wrap(ctx, "create: read", key, err)
		}
		got, err = io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil {
			return nil, false, s.wrap(ctx, "create: read", key, err)
		}
		if replace != nil && replace(got) {
			ifNoneMatch, ifMatch = nil, out.ETag
			continue
		}
		return got, false, nil
	}
	return nil, false, fmt.Errorf("s3store: create %s: changed under 8 attempts in a row", printedKey(key))
}
