package seal_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/seal"
	"github.com/idem-dev/idem/store"
	dynamodbstore "github.com/idem-dev/idem/store/dynamodb"
	"github.com/idem-dev/idem/store/storetest"
)

// dynamoClient returns a client of the test DynamoDB-compatible server
// (dynalite) with a connection pool of its own, closed when t ends.
func dynamoClient(t *testing.T) *dynamodb.Client {
	t.Helper()
	endpoint := testenv.DynamoDB(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	t.Cleanup(tr.CloseIdleConnections)
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("testkey", "testsecret", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
}

// dynamoTable creates a table for one store and deletes it when t ends.
func dynamoTable(t *testing.T, c *dynamodb.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := dynamodbstore.Migrate(ctx, c, name); err != nil {
		t.Fatalf("migrate %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	})
}

func TestConformanceDynamoDB(t *testing.T) {
	t.Parallel()
	c := dynamoClient(t)
	for _, r := range rings {
		t.Run(r.name, func(t *testing.T) {
			ring := mustRing(t, r.secret)
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) store.Store {
					name := uniqueName("idem-seal")
					dynamoTable(t, c, name)
					s, err := dynamodbstore.New(c, dynamodbstore.Options{Table: name})
					if err != nil {
						t.Fatal(err)
					}
					return seal.Wrap(s, ring)
				},
				Peer: func(t *testing.T, s store.Store) store.Store {
					inner := s.(interface{ Unwrap() store.Store }).Unwrap().(*dynamodbstore.Store)
					peer, err := dynamodbstore.New(dynamoClient(t), inner.Options())
					if err != nil {
						t.Fatal(err)
					}
					return seal.Wrap(peer, ring)
				},
				Racers:     32,
				Resolution: time.Second,
				// Sealing adds its header, nonce and tag to the value.
				MaxValue: dynamodbstore.MaxValueBytes - 64,
			})
		})
	}
}

func TestDumpDynamoDB(t *testing.T) {
	t.Parallel()
	c := dynamoClient(t)
	testDump(t, backend{
		open: func(t *testing.T, ns string) store.Store {
			dynamoTable(t, c, ns)
			s, err := dynamodbstore.New(c, dynamodbstore.Options{Table: ns})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		dump: func(t *testing.T, ns string) []byte {
			var out bytes.Buffer
			p := dynamodb.NewScanPaginator(c, &dynamodb.ScanInput{TableName: &ns})
			for p.HasMorePages() {
				page, err := p.NextPage(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range page.Items {
					names := make([]string, 0, len(it))
					for n := range it {
						names = append(names, n)
					}
					sort.Strings(names)
					for _, n := range names {
						switch v := it[n].(type) {
						case *types.AttributeValueMemberS:
							fmt.Fprintf(&out, "%s=%s\n", n, v.Value)
						case *types.AttributeValueMemberN:
							fmt.Fprintf(&out, "%s=%s\n", n, v.Value)
						case *types.AttributeValueMemberB:
							fmt.Fprintf(&out, "%s=%s\n", n, v.Value)
						default:
							fmt.Fprintf(&out, "%s=%v\n", n, v)
						}
					}
				}
			}
			return out.Bytes()
		},
	})
}
