package localtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// Locked opens a directory that another Store holds: in this process, and
// in another one, until the kernel drops the lock of a holder that died,
// even by SIGKILL.
func Locked(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := h.OpenT(t, dir)
	if _, err := h.Open(dir, nil); !errors.Is(err, h.ErrLocked) {
		t.Fatalf("second Open in one process: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := ChildCommand("hold", dir, 0)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // the child holds the store until it closes
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "open\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	_, err = h.Open(dir, nil)
	if !errors.Is(err, h.ErrLocked) {
		t.Fatalf("Open of a directory another process holds: %v, want ErrLocked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "another process") {
		t.Fatalf("message %q does not name the directory and the other process", msg)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	h.OpenT(t, dir)
}

// holdChild holds the store on dir until its stdin closes.
func holdChild(h Harness, dir string) int {
	s, err := h.Open(dir, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	fmt.Println("open")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
