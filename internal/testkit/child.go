package testkit

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Child is a copy of the test binary running as another process: a racer
// or a replica that a test kills with SIGKILL in the middle of its work.
// The test talks to it through Stdin and reads its stdout line by line
// from Lines, which is closed when the child's stdout ends.
type Child struct {
	Cmd   *exec.Cmd
	Stdin io.WriteCloser
	Lines <-chan string
}

// StartChild starts the test binary again with no test to run and env
// added to this process's environment; the package's TestMain sees env and
// runs the child's part instead of the tests. Its stderr is the test's.
// The child is killed when t ends, and by the kernel if the test binary
// dies first (a panic or a -timeout skip t.Cleanup).
func StartChild(t testing.TB, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	DieWithParent(cmd)
	stdin, stdout := StartPiped(t, cmd)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return &Child{Cmd: cmd, Stdin: stdin, Lines: lines}
}

// WaitLine reads the child's lines until one equals want, and says
// whether it came within d (false too if the child's stdout ended first).
func (c *Child) WaitLine(want string, d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-c.Lines:
			if !ok {
				return false
			}
			if l == want {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// ReleaseTogether is FanOut across processes: it waits (30 s at most) for
// every child to print "ready", then writes "go" to each, so that racers in
// separate processes start on their keys at the same instant.
func ReleaseTogether(t testing.TB, children ...*Child) {
	t.Helper()
	for i, c := range children {
		if !c.WaitLine("ready", 30*time.Second) {
			t.Fatalf("child %d never got ready", i)
		}
	}
	for _, c := range children {
		_, _ = io.WriteString(c.Stdin, "go\n")
	}
}

// StartPiped starts cmd with pipes to its stdin and from its stdout,
// failing t if it cannot.
func StartPiped(t testing.TB, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.Reader) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return stdin, out
}

// Start starts cmd with its stdout piped to the returned reader and its
// stderr kept in the returned buffer (for the test's failure message),
// failing t if it cannot.
func Start(t testing.TB, cmd *exec.Cmd) (stdout io.Reader, stderr *bytes.Buffer) {
	t.Helper()
	stderr = new(bytes.Buffer)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return out, stderr
}

// Stdout runs fn and returns what it printed on os.Stdout: a runnable
// example's output, checked by a test that needs set-up the example's
// Output comment cannot give.
func Stdout(t testing.TB, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	fn()
	os.Stdout = stdout
	w.Close()
	got, _ := io.ReadAll(r)
	return string(got)
}
