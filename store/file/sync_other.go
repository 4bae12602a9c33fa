//go:build !linux

package file

import (
	"errors"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

// preallocate is Linux's only; elsewhere the log grows its files.
func preallocate(*os.File, int64) error { return errors.ErrUnsupported }
