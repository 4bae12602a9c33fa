// Package testenv finds the services that idem's tests run against.
//
// Tests that need PostgreSQL or Redis read IDEM_TEST_POSTGRES and
// IDEM_TEST_REDIS (defaults: the machine's local servers). When a service
// cannot be reached the test is skipped, except under CI=true, where a
// missing service fails the run: CI must never pass by skipping.
package testenv

import (
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Default addresses of the services on the development machines.
const (
	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultRedis    = "redis://127.0.0.1:6379/0"
)

// CI reports whether the tests run under CI, where nothing may be skipped
// for want of a service.
func CI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// Postgres returns the DSN of the test PostgreSQL server.
func Postgres(t testing.TB) string {
	return service(t, "IDEM_TEST_POSTGRES", DefaultPostgres, "5432")
}

// Redis returns the URL of the test Redis server.
func Redis(t testing.TB) string {
	return service(t, "IDEM_TEST_REDIS", DefaultRedis, "6379")
}

// Unavailable skips t, or fails it under CI, because what it needs is missing.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf("CI=true and "+format, args...)
	}
	t.Skipf(format, args...)
}

func service(t testing.TB, env, def, port string) string {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		dsn = def
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s=%q: %v", env, dsn, err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), port)
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		Unavailable(t, "%s (%s) is unreachable: %v", env, dsn, err)
	}
	c.Close()
	return dsn
}
