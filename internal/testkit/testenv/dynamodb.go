package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DefaultDynamoDB is the endpoint of the DynamoDB-compatible test server
// (dynalite, which scripts/dynalite.sh starts).
const DefaultDynamoDB = "http://127.0.0.1:8000"

// DynamoDB returns the endpoint URL of the test DynamoDB-compatible
// server, from IDEM_TEST_DYNAMODB. Its credentials and region are the
// tests' own: dynalite checks that requests are signed, not by whom.
func DynamoDB(t testing.TB) string {
	t.Helper()
	endpoint := os.Getenv("IDEM_TEST_DYNAMODB")
	if endpoint == "" {
		endpoint = DefaultDynamoDB
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		t.Fatalf("IDEM_TEST_DYNAMODB=%q is not an http(s) URL", endpoint)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "8000")
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		Unavailable(t, "IDEM_TEST_DYNAMODB (%s) is unreachable (start dynalite with scripts/dynalite.sh start): %v", endpoint, err)
		return ""
	}
	c.Close()
	return endpoint
}

// DynamoDBTable readies the test server for a store that a DSN opens: it
// sets the tests' AWS credentials in the environment (not parallel, then),
// names a table no other run uses, after prefix, and deletes it when t
// ends. It returns the server's endpoint and the table's name.
func DynamoDBTable(t *testing.T, prefix string) (endpoint, table string) {
	t.Helper()
	endpoint = DynamoDB(t)
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
