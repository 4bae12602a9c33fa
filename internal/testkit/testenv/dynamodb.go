package testenv

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
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
