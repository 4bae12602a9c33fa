package testenv

import (
	"net"
	"os"
	"testing"
	"time"
)

// Default addresses of the brokers and of the Temporal dev server
// (scripts/temporal.sh starts it).
const (
	DefaultNATS     = "nats://127.0.0.1:4222"
	DefaultRabbitMQ = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultTemporal = "127.0.0.1:7233"
)

// NATS returns the URL of the test NATS server (JetStream enabled), from
// IDEM_TEST_NATS.
func NATS(t testing.TB) string {
	return service(t, "IDEM_TEST_NATS", DefaultNATS, "4222")
}

// RabbitMQ returns the AMQP URL of the test RabbitMQ server, from
// IDEM_TEST_AMQP.
func RabbitMQ(t testing.TB) string {
	return service(t, "IDEM_TEST_AMQP", DefaultRabbitMQ, "5672")
}

// Temporal returns the host:port of the test Temporal frontend, from
// IDEM_TEST_TEMPORAL. Start one with scripts/temporal.sh start.
func Temporal(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("IDEM_TEST_TEMPORAL")
	if addr == "" {
		addr = DefaultTemporal
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		Unavailable(t, "IDEM_TEST_TEMPORAL (%s) is unreachable (scripts/temporal.sh start): %v", addr, err)
		return ""
	}
	c.Close()
	return addr
}
