package dsn

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idem-dev/idem/internal/testkit/testdb"
	"github.com/idem-dev/idem/store"
	dynamodbstore "github.com/idem-dev/idem/store/dynamodb"
)

func TestParseDynamoDB(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want DynamoDBConfig
		err  string
	}{
		{in: "dynamodb://idem", want: DynamoDBConfig{Table: "idem"}},
		{in: "dynamodb://idem/", want: DynamoDBConfig{Table: "idem"}},
		{in: "dynamodb://Idem_Records-2.prod?region=eu-west-1", want: DynamoDBConfig{Table: "Idem_Records-2.prod", Region: "eu-west-1"}},
		{in: "dynamodb://idem?endpoint=http://127.0.0.1:8000", want: DynamoDBConfig{Table: "idem", Region: "us-east-1", Endpoint: "http://127.0.0.1:8000"}},
		{in: "dynamodb://idem?endpoint=https://dynamo.example/&region=local-1", want: DynamoDBConfig{Table: "idem", Region: "local-1", Endpoint: "https://dynamo.example"}},
		{in: "DynamoDB://idem", want: DynamoDBConfig{Table: "idem"}},

		{in: "dynamodb://", err: "table"},
		{in: "dynamodb://ab", err: "table"},
		{in: "dynamodb://idem%20x", err: ""},
		{in: "dynamodb:idem", err: "two slashes"},
		{in: "dynamodb://idem/records", err: "names a table"},
		{in: "dynamodb://idem:8000", err: "names a table"},
		{in: "dynamodb://key:secret@idem", err: "credentials"},
		{in: "dynamodb://idem?regoin=eu-west-1", err: `unknown parameter "regoin"`},
		{in: "dynamodb://idem?idem_prefix=x", err: "unknown parameter"},
		{in: "dynamodb://idem?region=eu-west-1&region=us-east-1", err: "given 2 times"},
		{in: "dynamodb://idem?region=", err: "region"},
		{in: "dynamodb://idem?region=EU_WEST", err: "region"},
		{in: "dynamodb://idem?endpoint=127.0.0.1:8000", err: "endpoint"},
		{in: "dynamodb://idem?endpoint=ftp://h", err: "endpoint"},
		{in: "dynamodb://idem?endpoint=http://h/path", err: "endpoint"},
		{in: "dynamodb://idem?endpoint=http://u:p@h", err: "endpoint"},
		{in: "dynamodb://idem#x", err: "fragment"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseDynamoDB(tc.in)
			if tc.err != "" || (tc.want == DynamoDBConfig{}) {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseDynamoDB(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error shows the password: %v", err)
				}
				// Parse refuses it too, naming the store.
				if _, err := Parse(tc.in); err == nil {
					t.Fatalf("Parse(%q) accepted it", tc.in)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseDynamoDB(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			d, err := Parse(tc.in)
			if err != nil || d.Kind != DynamoDB || d.URL != tc.in {
				t.Fatalf("Parse(%q) = %+v, %v", tc.in, d, err)
			}
		})
	}
}

// TestOpenDynamoDB opens a store on dynalite from a DSN: with migration it
// creates the table (native TTL's absence logged as a warning), without
// it a missing table is refused, naming the fix.
func TestOpenDynamoDB(t *testing.T) {
	endpoint, table := testdb.DynamoDBTable(t, "idem-dsn")
	ctx := context.Background()
	dsn := "dynamodb://" + table + "?endpoint=" + endpoint

	if _, err := Open(ctx, dsn, Options{ConnectTimeout: 10 * time.Second}); !errors.Is(err, dynamodbstore.ErrTableMissing) || !strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("Open without migration of a missing table: %v", err)
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	o, err := Open(ctx, dsn, Options{Migrate: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if !strings.Contains(logs.String(), "created the DynamoDB table") || !strings.Contains(logs.String(), "UnknownOperationException") {
		t.Fatalf("logs: %s", logs.String())
	}
	key := "k-" + table
	res, err := o.Reserve(ctx, store.ReserveRequest{Record: store.Record{KeyHash: store.HashKey("s", key), Scope: "s", Key: key,
		State: store.InProgress, Token: 1}, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Acquired {
		t.Fatalf("Reserve: %+v, %v", res, err)
	}
	rep, err := MigrateDynamoDB(ctx, dsn)
	if err != nil || rep.Created || rep.TTLWarning == nil {
		t.Fatalf("MigrateDynamoDB of an existing table: %+v, %v", rep, err)
	}
	if _, err := MigrateDynamoDB(ctx, "redis://127.0.0.1:6379"); err == nil {
		t.Fatal("MigrateDynamoDB of a Redis DSN")
	}
}
