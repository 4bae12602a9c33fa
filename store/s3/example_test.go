package s3store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/idem-dev/idem"
	s3store "github.com/idem-dev/idem/store/s3"
)

// Example is the S3 task queue's idempotent submit: records in the queue's own
// bucket under idempotency/, kept 30 days, and a lifecycle rule that lets S3
// delete them afterwards.
//
// It has no Output section because it needs an S3 server (here a local
// versitygw, as scripts/s3-server.sh starts it); the task queue's tests run the
// same steps.
func Example() {
	ctx := context.Background()
	// On AWS: cfg, _ := config.LoadDefaultConfig(ctx); client := s3.NewFromConfig(cfg).
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String("http://127.0.0.1:7070"),
		Region:       "us-east-1",
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("testkey", "testsecret", ""),
	})
	st, err := s3store.New(client, s3store.Options{Bucket: "task-queue"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	const ttl = 30 * 24 * time.Hour
	// Once per bucket (it replaces the bucket's lifecycle configuration:
	// merge with the rules it already has).
	_, err = client.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{
		Bucket:                 aws.String("task-queue"),
		LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{st.LifecycleRule(ttl)}},
	})
	if err != nil {
		log.Printf("lifecycle rule not set (%v); run Cleanup from a scheduler instead", err)
	}

	// The lifecycle rule deletes expired records, so the engine need not
	// list the bucket.
	eng := idem.New(st, idem.Policy{TTL: ttl, CleanupInterval: -1})
	defer eng.Close()

	input := map[string]any{"order_id": "ORD-123", "amount_cents": 4200}
	inputHash, err := idem.HashJSON(input)
	if err != nil {
		log.Fatal(err)
	}
	res, err := eng.Do(ctx, idem.Call{Scope: "charge_customer", Key: "charge-ORD-123", Fingerprint: inputHash},
		func(ctx context.Context) ([]byte, error) {
			// Create tasks/{shard}/{task_id}.json here; its ID is what every
			// retry of this key gets back.
			return json.Marshal(map[string]string{"task_id": "6f1c1e0e-3c9a-4a53-9d39-1a4b1d0f5e11"})
		})
	if err != nil {
		log.Fatal(err) // idem.ErrFingerprintMismatch: same key, another input
	}
	fmt.Printf("task %s (replayed: %v)\n", res.Value, res.Replayed)
	// Record: idempotency/charge_customer/<sha256("charge_customer:charge-ORD-123")>.json
}
