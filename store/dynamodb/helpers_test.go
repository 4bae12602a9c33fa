package dynamodbstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	dynamodbstore "github.com/idem-dev/idem/store/dynamodb"
)

// The tests run against dynalite, a DynamoDB-compatible server
// (scripts/dynalite.sh start; IDEM_TEST_DYNAMODB names another), with
// static credentials: dynalite checks that a request is signed, not by
// whom. Each store gets a table of its own, deleted when its test ends.

func TestMain(m *testing.M) {
	race.Child() // a re-executed test binary is a racer of TestMultiProcessRace
	testkit.VerifyTestMainAfter(m, func() {
		transport.CloseIdleConnections()
		peerTransport.CloseIdleConnections()
	})
}

// Two connection pools: the stores' own, and their peers', so that the
// suite's races run across clients as they do across processes.
var (
	transport     = newTransport()
	peerTransport = newTransport()
)

func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}

// clientOptions are those of every test client of endpoint, through rt
// (the pool or a wrapper around it).
func clientOptions(endpoint string, rt http.RoundTripper) dynamodb.Options {
	return dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("testkey", "testsecret", ""),
		HTTPClient:   &http.Client{Transport: rt},
		// The tests' wrappers make up Dates; the signing time must not
		// follow them.
		DisableClockSkewCorrection: true,
	}
}

// newClient returns a client of the test server through rt; nil means
// the stores' pool.
func newClient(t testing.TB, rt http.RoundTripper) *dynamodb.Client {
	t.Helper()
	if rt == nil {
		rt = transport
	}
	return dynamodb.New(clientOptions(testenv.DynamoDB(t), rt))
}

var tableSeq atomic.Int64

// newTable creates a table of its own for t through idem's migration, and
// deletes it when t ends.
func newTable(t testing.TB) string {
	t.Helper()
	c := newClient(t, nil)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := fmt.Sprintf("idem-test-%s-%d", hex.EncodeToString(b), tableSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := dynamodbstore.Migrate(ctx, c, name); err != nil {
		t.Fatalf("migrate %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
			t.Errorf("delete table %s: %v", name, err)
		}
	})
	return name
}

// newStore returns a store on a new table through c (nil: the pool).
func newStore(t testing.TB, c *dynamodb.Client) *dynamodbstore.Store {
	t.Helper()
	if c == nil {
		c = newClient(t, nil)
	}
	s, err := dynamodbstore.New(c, dynamodbstore.Options{Table: newTable(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// storeOn returns another store on the table of s, through c.
func storeOn(t testing.TB, s *dynamodbstore.Store, c *dynamodb.Client) *dynamodbstore.Store {
	t.Helper()
	p, err := dynamodbstore.New(c, s.Options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// rawItem reads the item of keyHash in table as stored.
func rawItem(t testing.TB, table, keyHash string) map[string]types.AttributeValue {
	t.Helper()
	out, err := newClient(t, nil).GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      &table,
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: keyHash}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func numAttr(t testing.TB, m map[string]types.AttributeValue, name string) string {
	t.Helper()
	v, ok := m[name].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("attribute %s: %#v, want a number", name, m[name])
	}
	return v.Value
}

func reserve(t testing.TB, s store.Store, req store.ReserveRequest) store.Reservation {
	t.Helper()
	res, err := s.Reserve(context.Background(), req)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	return res
}

func mustAcquire(t testing.TB, s store.Store, req store.ReserveRequest) {
	t.Helper()
	if res := reserve(t, s, req); !res.Acquired {
		t.Fatalf("Reserve: not acquired; existing %+v", res.Existing)
	}
}

func get(t testing.TB, s store.Store, req store.ReserveRequest) store.Record {
	t.Helper()
	r, err := s.Get(context.Background(), req.Record.Scope, req.Record.KeyHash)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return r
}

// watchClock is a monotonic clock for a store's lease watch that moves
// only when stepped (SetWatchClock).
type watchClock struct{ now atomic.Int64 }

func (c *watchClock) read() time.Duration  { return time.Duration(c.now.Load()) }
func (c *watchClock) step(d time.Duration) { c.now.Add(int64(d)) }

// watched sets a stepped clock on s's lease watch and returns it.
func watched(s *dynamodbstore.Store) *watchClock {
	c := &watchClock{}
	dynamodbstore.SetWatchClock(s, c.read)
	return c
}
