package redisd

import (
	"context"
	"testing"

	"github.com/idem-dev/idem/internal/testkit/testenv"
	"github.com/redis/go-redis/v9"
)

// TestKillRestartKeepsWrites: a write answered before a SIGKILL is there
// after the restart (appendfsync always), and the server is durable as
// configured.
func TestKillRestartKeepsWrites(t *testing.T) {
	if !Available() {
		if testenv.CI() {
			t.Fatal("redis-server is not installed; under CI=true a missing server fails the run")
		}
		t.Skip("redis-server is not installed")
	}
	ctx := context.Background()
	s, err := Start(ctx, t.TempDir(), 16395)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:16395"})
	defer c.Close()
	if got := c.ConfigGet(ctx, "appendfsync").Val()["appendfsync"]; got != "always" {
		t.Fatalf("appendfsync %q", got)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after kill -9 and restart: %q %v", v, err)
	}
	if m, err := s.UsedMemory(ctx); err != nil || m <= 0 {
		t.Fatalf("used memory %d %v", m, err)
	}
}
