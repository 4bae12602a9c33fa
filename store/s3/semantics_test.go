package s3store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	s3store "github.com/idem-dev/idem/store/s3"
)

// TestServerSemantics pins down what the store relies on from the server,
// and records where gofakes3 differs, so that a server upgrade that changes
// any of it shows up here rather than as a rare double execution.
func TestServerSemantics(t *testing.T) {
	t.Parallel()
	for _, srv := range []*server{realServer(t), fakeServer(t)} {
		t.Run(srv.name, func(t *testing.T) {
			ctx := context.Background()
			c := srv.client(nil)
			key := uniquePrefix() + "obj.json"
			t.Cleanup(func() { dropPrefix(srv, strings.Split(key, "/")[0]+"/") })
			put := func(body, ifMatch string, create bool) (string, error) {
				in := &s3.PutObjectInput{Bucket: &srv.bucket, Key: &key, Body: strings.NewReader(body)}
				if create {
					in.IfNoneMatch = aws.String("*")
				}
				if ifMatch != "" {
					in.IfMatch = aws.String(ifMatch)
				}
				out, err := c.PutObject(ctx, in)
				if err != nil {
					return "", err
				}
				return aws.ToString(out.ETag), nil
			}
			code := func(err error) string {
				var ae smithy.APIError
				if errors.As(err, &ae) {
					return ae.ErrorCode()
				}
				return ""
			}

			// If-Match on a missing key: AWS and versitygw say NoSuchKey
			// (404); gofakes3 says PreconditionFailed (412). The store
			// treats both as "changed: read again".
			_, err := put("x", `"0123"`, false)
			switch srv.name {
			case "gofakes3":
				if code(err) != "PreconditionFailed" {
					t.Errorf("If-Match on a missing key: %v", err)
				}
			default:
				if code(err) != "NoSuchKey" {
					t.Errorf("If-Match on a missing key: %v, want NoSuchKey", err)
				}
			}
			e1, err := put("one", "", true)
			if err != nil || e1 == "" {
				t.Fatalf("create: %q, %v", e1, err)
			}
			if _, err := put("two", "", true); code(err) != "PreconditionFailed" {
				t.Fatalf("second create: %v, want PreconditionFailed", err)
			}
			e2, err := put("two", e1, false)
			if err != nil || e2 == e1 {
				t.Fatalf("If-Match on the current ETag: %q, %v", e2, err)
			}
			if _, err := put("three", e1, false); code(err) != "PreconditionFailed" {
				t.Fatalf("If-Match on an old ETag: %v, want PreconditionFailed", err)
			}
			get, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &srv.bucket, Key: &key})
			if err != nil {
				t.Fatal(err)
			}
			get.Body.Close()
			if aws.ToString(get.ETag) != e2 {
				t.Fatalf("GET ETag %s, PUT said %s", aws.ToString(get.ETag), e2)
			}

			// DELETE with If-Match on an old ETag: versitygw (and AWS)
			// refuse it; gofakes3 deletes anyway.
			_, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &srv.bucket, Key: &key, IfMatch: aws.String(e1)})
			_, herr := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &srv.bucket, Key: &key})
			switch srv.name {
			case "gofakes3":
				if err != nil || herr == nil {
					t.Logf("gofakes3 now honours If-Match on DELETE (%v, %v): update docs/stores/S3.md", err, herr)
				}
			default:
				if code(err) != "PreconditionFailed" || herr != nil {
					t.Fatalf("DELETE If-Match an old ETag: %v (object there: %v); the store's Release and Cleanup rely on a 412", err, herr == nil)
				}
				if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &srv.bucket, Key: &key, IfMatch: aws.String(e2)}); err != nil {
					t.Fatalf("DELETE If-Match the current ETag: %v", err)
				}
			}
		})
	}
}

func TestParseDSN(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]s3store.Config{
		"s3://idem-records":                    {Options: s3store.Options{Bucket: "idem-records"}},
		"s3://shared/billing?region=eu-west-1": {Options: s3store.Options{Bucket: "shared", Prefix: "billing/"}, Region: "eu-west-1"},
		"s3://idem/app/v1/?endpoint=http://127.0.0.1:7070": {
			Options: s3store.Options{Bucket: "idem", Prefix: "app/v1/"}, Endpoint: "http://127.0.0.1:7070", Region: "us-east-1", PathStyle: true,
		},
		"s3://idem?endpoint=https://r2.example&region=auto&path_style=false": {
			Options: s3store.Options{Bucket: "idem"}, Endpoint: "https://r2.example", Region: "auto",
		},
	} {
		got, err := s3store.ParseDSN(dsn)
		if err != nil || got != want {
			t.Errorf("ParseDSN(%q) = %+v, %v; want %+v", dsn, got, err, want)
		}
	}
	for _, bad := range []string{
		"s3://", "s3:///prefix", "http://bucket", "s3://k:secret@bucket",
		"s3://b?endpoint=127.0.0.1:7070", "s3://b?path_style=maybe", "s3://b?idem_prefix=x",
	} {
		if c, err := s3store.ParseDSN(bad); err == nil {
			t.Errorf("ParseDSN(%q) = %+v, want an error", bad, c)
		}
	}
	c, _ := s3store.ParseDSN("s3://idem/app?endpoint=http://127.0.0.1:7070")
	var o s3.Options
	c.ClientOptions(&o)
	if aws.ToString(o.BaseEndpoint) != "http://127.0.0.1:7070" || o.Region != "us-east-1" || !o.UsePathStyle {
		t.Fatalf("client options %+v", o)
	}
}

func TestLifecycleRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix string
		ttl    time.Duration
		days   int32
		filter string
	}{
		{"", 30 * 24 * time.Hour, 31, "idempotency/"}, // the S3 task queue's default
		{"billing", 24 * time.Hour, 2, "billing/idempotency/"},
		{"a/", 25 * time.Hour, 3, "a/idempotency/"},
		{"", time.Minute, 2, "idempotency/"},
	} {
		r := s3store.LifecycleRule(tc.prefix, tc.ttl)
		if r.Status != types.ExpirationStatusEnabled || aws.ToInt32(r.Expiration.Days) != tc.days ||
			aws.ToString(r.Filter.Prefix) != tc.filter || aws.ToInt32(r.NoncurrentVersionExpiration.NoncurrentDays) != 1 ||
			aws.ToString(r.ID) == "" {
			t.Errorf("LifecycleRule(%q, %v): days %d, filter %q; want %d, %q",
				tc.prefix, tc.ttl, aws.ToInt32(r.Expiration.Days), aws.ToString(r.Filter.Prefix), tc.days, tc.filter)
		}
	}
}
