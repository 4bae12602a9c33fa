package s3store_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-dev/idem/store"
	"github.com/idem-dev/idem/store/storetest"
)

// BenchmarkPairs measures Reserve+Complete pairs on fresh keys, at
// concurrency 1 and 16, next to the floor any S3 store has: the same two
// conditional PUTs sent raw (If-None-Match: *, then If-Match on the ETag
// the first returned). Run it with:
//
//	go test -run '^$' -bench Pairs -benchtime 2s ./store/s3/
func BenchmarkPairs(b *testing.B) {
	for _, srv := range []func(testing.TB) *server{realServer, fakeServer} {
		srv := srv(b)
		c := srv.client(nil)
		s := newStore(b, srv, c)
		prefix := s.Options().Prefix
		value := []byte(`{"task_id":"6f1c1e0e-3c9a-4a53-9d39-1a4b1d0f5e11","task_key":"tasks/6/6f1c1e0e.json"}`)
		var seq atomic.Uint64
		storePair := func() error {
			return storetest.FreshPair(context.Background(), s, seq.Add(1), "charge_customer", value, time.Hour)
		}
		rawPair := func() error {
			key := prefix + "raw/" + strconv.FormatUint(seq.Add(1), 10) + ".json"
			ctx := context.Background()
			out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.bucket, Key: &key,
				Body: bytes.NewReader(value), IfNoneMatch: aws.String("*")})
			if err != nil {
				return err
			}
			_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.bucket, Key: &key,
				Body: bytes.NewReader(value), IfMatch: out.ETag})
			return err
		}
		for _, conc := range []int{1, 16} {
			for _, v := range []struct {
				name string
				pair func() error
			}{{"store", storePair}, {"raw", rawPair}} {
				b.Run(fmt.Sprintf("%s/c%d/%s", srv.name, conc, v.name), func(b *testing.B) {
					storetest.RunRate(b, conc, "pairs/s", func(uint64) error { return v.pair() })
				})
			}
		}
	}
}

// BenchmarkEngine runs the engine's benchmark (first executions and
// replays, concurrency 1 and 64) on the S3 store.
func BenchmarkEngine(b *testing.B) {
	srv := realServer(b)
	storetest.Bench(b, func(b *testing.B) store.Store { return newStore(b, srv, nil) })
}
