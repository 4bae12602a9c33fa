package dirlock_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/idem-dev/idem/internal/testkit"
	"github.com/idem-dev/idem/store/internal/dirlock"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestLockIsExclusive: two stores of one process opening one directory
// (a gateway configured twice) are refused like two processes, and the
// directory is free again once the holder closes it. The stores' tests
// check the other process and SIGKILL.
func TestLockIsExclusive(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.lock")
	l, err := dirlock.Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dirlock.Lock(path); !errors.Is(err, dirlock.ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = dirlock.Lock(path)
	if err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLockMissingDirectory: a directory that does not exist is an error
// of its own, not "another process holds it", which would send the
// operator looking for a process that is not there.
func TestLockMissingDirectory(t *testing.T) {
	t.Parallel()
	_, err := dirlock.Lock(filepath.Join(t.TempDir(), "absent", "idem.lock"))
	if err == nil || errors.Is(err, dirlock.ErrLocked) {
		t.Fatalf("Lock in a missing directory: %v, want an error other than ErrLocked", err)
	}
}
