package dynamodbstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-dev/idem"
	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/internal/testkit/testenv"
	dynamodbstore "github.com/idem-dev/idem/store/dynamodb"
)

// Example creates the table, then charges an order once: the retry with
// the same key gets the first outcome back without running the work.
func Example() {
	ctx := context.Background()
	// On AWS: cfg, err := config.LoadDefaultConfig(ctx); client := dynamodb.NewFromConfig(cfg).
	// Here dynalite, as scripts/dynalite.sh starts it.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	client := dynamodb.New(dynamodb.Options{
		BaseEndpoint: aws.String(os.Getenv("DYNAMODB_ENDPOINT")),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("key", "secret", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
	rep, err := dynamodbstore.Migrate(ctx, client, "idem_example")
	if err != nil {
		log.Fatal(err)
	}
	if rep.TTLWarning != nil {
		log.Printf("warning: %v", rep.TTLWarning) // dynalite: no native TTL
	}
	st, err := dynamodbstore.New(client, dynamodbstore.Options{Table: "idem_example"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// Native TTL deletes expired items on AWS: no background scans.
	eng := idem.New(st, idem.Policy{TTL: 24 * time.Hour, CleanupInterval: -1})
	defer eng.Close()

	charges := 0
	charge := func(context.Context) ([]byte, error) {
		charges++
		return []byte(`{"id":"ch_1"}`), nil
	}
	call := idem.Call{Scope: "charges", Key: "order-42", Fingerprint: "sha256:amount=4200"}
	for range 2 {
		res, err := eng.Do(ctx, call, charge)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s replayed=%v\n", res.Value, res.Replayed)
	}
	fmt.Println("charges:", charges)

	// It prints (TestExample checks; an Output comment would make go test
	// run it even where no server is reachable):
	//
	// {"id":"ch_1"} replayed=false
	// {"id":"ch_1"} replayed=true
	// charges: 1
}

// TestExample runs Example against the test server and checks what it
// prints. The example's table is deleted before and after.
func TestExample(t *testing.T) {
	endpoint := testenv.DynamoDB(t)
	t.Setenv("DYNAMODB_ENDPOINT", endpoint)
	c := newClient(t, nil)
	drop := func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String("idem_example")})
	}
	drop()
	defer drop()

	got := testkit.Stdout(t, Example)
	want := "{\"id\":\"ch_1\"} replayed=false\n{\"id\":\"ch_1\"} replayed=true\ncharges: 1\n"
	if got != want {
		t.Fatalf("Example printed:\n%s\nwant:\n%s", got, want)
	}
}
