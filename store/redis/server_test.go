package redisstore_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-dev/idem/internal/testkit/testenv"
)

// server is a throwaway redis-server that a test starts, stops, pauses and
// restarts, without persistence.
type server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// redisBinaries makes sure the named Redis programs are installed.
func redisBinaries(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			testenv.Unavailable(t, "%s is not installed: %v", n, err)
		}
	}
}

// sparePort returns a TCP port that nothing listens on right now.
func sparePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer starts redis-server on a spare port in a directory of its own,
// with extra arguments, and stops it when the test ends.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	redisBinaries(t, "redis-server")
	return startServerOn(t, sparePort(t), extra...)
}

// startServerOn is startServer on a given port.
func startServerOn(t testing.TB, port int, extra ...string) *server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), strconv.Itoa(port))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, port: port, dir: dir}
	s.args = append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
	}, extra...)
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server (again) and waits until it answers PING.
func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", s.args...)
	s.cmd.Dir = s.dir
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not start: %v\n%s", s.addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the server the hard way, as a crash would.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies only once running
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *server) stop() { s.kill() }

// pause freezes the server: connections stay open and nothing answers, as
// in a network partition.
func (s *server) pause()  { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *server) resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }
