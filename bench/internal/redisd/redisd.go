// Package redisd starts redis-server processes of the harness's own: a
// durable one (appendonly yes, appendfsync always) beside the machine's
// Redis, so that durable and non-durable Redis are measured as such, and
// one that the footprint stage fills, kills and restarts.
package redisd

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/bench/internal/proc"
)

// Server is a running redis-server.
type Server struct {
	Port int
	Dir  string
	p    *proc.Proc
	n    int // starts, for the log file's name
}

// Available reports whether redis-server is installed.
func Available() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Start starts redis-server on 127.0.0.1:port with its files in dir,
// every write appended to its AOF and fsynced before it answers
// (appendonly yes, appendfsync always), no RDB snapshots, and waits until
// it answers.
func Start(ctx context.Context, dir string, port int) (*Server, error) {
	s := &Server{Port: port, Dir: dir}
	_, err := s.start(ctx)
	return s, err
}

func (s *Server) start(ctx context.Context) (time.Duration, error) {
	s.n++
	argv := []string{"redis-server", "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.Dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no"}
	start := time.Now()
	p, err := proc.Start(fmt.Sprintf("redis-%d", s.Port), argv, nil, s.Dir, filepath.Join(s.Dir, fmt.Sprintf("redis-%d.log", s.n)))
	if err != nil {
		return 0, err
	}
	s.p = p
	if err := s.waitReady(ctx, 10*time.Minute); err != nil {
		p.Stop(5 * time.Second)
		return 0, err
	}
	return time.Since(start), nil
}

// URL is the server's URL, without a database number.
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d", s.Port) }

// Restart kills the server with SIGKILL, starts it again on the same
// files, and returns how long it took to answer again: replaying its AOF.
func (s *Server) Restart(ctx context.Context) (time.Duration, error) {
	s.p.Kill()
	return s.start(ctx)
}

// Stop stops the server.
func (s *Server) Stop() {
	if s.p != nil {
		s.p.Stop(10 * time.Second)
	}
}

// UsedMemory is the server's INFO used_memory, in bytes.
func (s *Server) UsedMemory(ctx context.Context) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port)})
	defer c.Close()
	info, err := c.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
}

// waitReady polls PING until it answers PONG: a server still loading its
// AOF answers LOADING.
func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if ended, werr := s.p.Exited(); ended {
			return fmt.Errorf("redis-server on %d exited: %v", s.Port, werr)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis-server on %d not ready: %v", s.Port, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
