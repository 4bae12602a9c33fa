package dynamodbstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/idem-dev/idem/store"
	dynamodbstore "github.com/idem-dev/idem/store/dynamodb"
	"github.com/idem-dev/idem/store/storetest"
)

// TestConformance runs the store contract's suite against dynalite, with
// a peer of its own connection pool for the races, clock skews included:
// expiry judged on the server's Date (a second's resolution), leases by
// observe and wait.
//
// Not parallel, so that it runs before the package's other tests share
// dynalite with it: the clock-skew cases renew one-second leases every
// third of a second, and a server stalled by other tests' bursts makes a
// holder give its lease up (which the suite counts as a failure, though no
// key runs twice).
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return newStore(t, nil) },
		Peer: func(t *testing.T, s store.Store) store.Store {
			return storeOn(t, s.(*dynamodbstore.Store), newClient(t, peerTransport))
		},
		IndexKeys: func(t *testing.T, s store.Store) []string {
			table := s.(*dynamodbstore.Store).Options().Table
			out, err := newClient(t, nil).Scan(context.Background(), &dynamodb.ScanInput{TableName: &table})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, it := range out.Items {
				if pk, ok := it["pk"].(*types.AttributeValueMemberS); ok {
					keys = append(keys, pk.Value)
				}
			}
			return keys
		},
		Racers:     32,
		Resolution: time.Second,
		MaxValue:   dynamodbstore.MaxValueBytes,
	})
}

// raceConfig tells a racer process where the table is.
type raceConfig struct {
	Endpoint string `json:"endpoint"`
	Table    string `json:"table"`
}

// race has 3 processes besides the test's own, each with its own client
// and connection pool, reserve 24 keys at the same moments.
var race = storetest.ProcessRace{
	Name: "DYNAMODB", Procs: 3, Goroutines: 8, Keys: 24,
	Open: func(ctx context.Context, config string) (store.Store, func(), error) {
		var c raceConfig
		if err := json.Unmarshal([]byte(config), &c); err != nil {
			return nil, nil, err
		}
		tr := newTransport()
		client := dynamodb.New(clientOptions(c.Endpoint, tr))
		s, err := dynamodbstore.New(client, dynamodbstore.Options{Table: c.Table})
		if err != nil {
			return nil, nil, err
		}
		// Read the server's clock and open a connection before the start,
		// so that the race is between writes.
		if err := s.Check(ctx); err != nil {
			return nil, nil, err
		}
		return s, tr.CloseIdleConnections, nil
	},
}

// TestMultiProcessRace has several OS processes (this test binary,
// re-run), each with several goroutines and its own client, reserve the
// same keys at the same moments. Every key must have exactly one winner,
// and every loser must have seen the winner's token.
func TestMultiProcessRace(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	config, _ := json.Marshal(raceConfig{Endpoint: testenv.DynamoDB(t), Table: s.Options().Table})
	race.Run(t, s, string(config))
}
