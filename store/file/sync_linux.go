package file

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data and the metadata needed to read it back (its
// size), not its times: what a log append needs, at a lower cost than fsync.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
