// Package testdb opens what the tests need of the databases that
// testenv finds: a PostgreSQL pool, a schema an example writes in, a
// DynamoDB table of a test's own. It is apart from testenv so that
// modules whose tests only look services up (trigger/temporal) do not
// depend on the databases' drivers.
package testdb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// PostgresPool connects to the server at dsn (testenv.Postgres(t) for
// the test server) with at most maxConns connections, configured further by
// configure; the pool is closed when t ends.
func PostgresPool(t testing.TB, dsn string, maxConns int32, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	for _, f := range configure {
		f(cfg)
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// PostgresExample readies the test server for an example that reads its
// DSN from DATABASE_URL and writes in schema: it sets DATABASE_URL for t,
// and drops schema now and when t ends.
func PostgresExample(t *testing.T, schema string) {
	t.Helper()
	dsn := testenv.Postgres(t)
	t.Setenv("DATABASE_URL", dsn)
	pool := PostgresPool(t, dsn, 2)
	drop := func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	}
	drop()
	t.Cleanup(drop)
}

// DynamoDBTable readies the test server for a store that a DSN opens: it
// sets the tests' AWS credentials in the environment (not parallel, then),
// names a table no other run uses, after prefix, and deletes it when t
// ends. It returns the server's endpoint and the table's name.
func DynamoDBTable(t *testing.T, prefix string) (endpoint, table string) {
	t.Helper()
	endpoint = testenv.DynamoDB(t)
	// The SDK's credential chain reads the environment; dynalite checks
	// that requests are signed, not by whom.
	t.Setenv("AWS_ACCESS_KEY_ID", "testkey")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "testsecret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	table = fmt.Sprintf("%s-%d", prefix, rand.Uint64())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	admin := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("testkey", "testsecret", ""),
		HTTPClient:  &http.Client{Transport: tr}})
	t.Cleanup(func() {
		_, _ = admin.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table})
		tr.CloseIdleConnections()
	})
	return endpoint, table
}
