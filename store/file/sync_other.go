//go:build !linux

package file

import "os"

func fdatasync(f *os.File) error { return f.Sync() }
