// Package tmpdisk gives tests a small disk to fill: a tmpfs of a chosen
// size, mounted for one test. The embedded stores' full-disk tests run on
// it, and so does the gateway's (cmd/idem), which is why it lives here
// rather than under store/.
package tmpdisk

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Mount mounts a tmpfs of size (mount's syntax: "12m") on a new directory
// and unmounts it when the test ends. Mounting needs root: without it the
// test is skipped, except under CI=true, where it fails.
func Mount(t testing.TB, size string) string {
	t.Helper()
	if !supported {
		t.Skip("the full-disk tests mount a tmpfs, which needs Linux")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the full-disk tests mount a tmpfs, which needs root; under CI=true they must run")
		}
		t.Skip("the full-disk tests mount a tmpfs, which needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs of %s on %s: %v: %s", size, dir, err, out)
	}
	// Registered after TempDir's removal, so it runs before it.
	t.Cleanup(func() {
		// A process just killed, or one walking /tmp, can keep the mount
		// busy for a moment: try again a few times before failing.
		var out []byte
		var err error
		for range 50 {
			if out, err = exec.Command("umount", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "busy") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Ballast writes a file at path of size bytes, or until the disk is full
// when size <= 0.
func Ballast(t testing.TB, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for n := int64(0); size <= 0 || n < size; {
		b := chunk
		if size > 0 {
			b = chunk[:min(int64(len(chunk)), size-n)]
		}
		m, err := f.Write(b)
		n += int64(m)
		if err != nil {
			if size <= 0 && errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// Leave writes a ballast file at path that leaves about free bytes free
// on its filesystem.
func Leave(t testing.TB, path string, free int64) {
	t.Helper()
	Ballast(t, path, Free(t, filepath.Dir(path))-free)
}
