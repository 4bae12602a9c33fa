package pebblestore

import (
	"io"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/vfs"
)

// fencedFS is the filesystem of one engine. Fencing it takes the
// directory from that engine for good: every change the engine makes
// after that fails, the files it holds are closed (so that tables it
// still reads from but a new engine deletes give their room back), and
// its lock on the directory is released, so that a new engine can open
// the directory in this process while the fenced one is left behind.
//
// That is how the store replaces an engine that cannot be closed (see
// errEngineStuck) without a restart. A change already under way when the
// fence goes up finishes before it does, so nothing the old engine does
// lands after the new one opens. A goroutine of the old engine that then
// tries to open a file or change the directory waits forever rather than
// fail: a failed compaction is picked again at once, and would spin. The
// old engine's goroutines so stay blocked, with its memtables, until the
// process exits.
type fencedFS struct {
	vfs.FS

	// mu is read-held across every change to the directory and
	// write-held by fence, which so waits for changes under way.
	mu     sync.RWMutex
	fenced bool
	// parked is never closed: see park.
	parked chan struct{}
	// open holds the files and the lock the engine holds, to be closed
	// by fence.
	open map[io.Closer]struct{}
}

func newFencedFS(fs vfs.FS) *fencedFS {
	return &fencedFS{FS: fs, open: map[io.Closer]struct{}{}, parked: make(chan struct{})}
}

// fence takes the directory from the engine; it may be called twice.
func (fs *fencedFS) fence() {
	fs.mu.Lock()
	fs.fenced = true
	open := fs.open
	fs.open = map[io.Closer]struct{}{}
	fs.mu.Unlock()
	for c := range open {
		_ = c.Close()
	}
}

// isFenced reports whether fence was called.
func (fs *fencedFS) isFenced() bool {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	return fs.fenced
}

// park blocks the fenced engine's goroutine for good.
func (fs *fencedFS) park() { <-fs.parked }

// change runs fn, a change to the directory, unless the engine is
// fenced: it then never returns.
func (fs *fencedFS) change(fn func() error) error {
	fs.mu.RLock()
	if fs.fenced {
		fs.mu.RUnlock()
		fs.park()
	}
	defer fs.mu.RUnlock()
	return fn()
}

// track keeps a file the engine opened, for fence to close.
func (fs *fencedFS) track(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	ff := &fencedFile{File: f, fs: fs}
	fs.keep(ff)
	return ff, nil
}

// keep adds c to what fence closes. What was opened as the fence went up
// is closed at once, and the caller waits forever.
func (fs *fencedFS) keep(c io.Closer) {
	fs.mu.Lock()
	if fs.fenced {
		fs.mu.Unlock()
		c.Close()
		fs.park()
	}
	defer fs.mu.Unlock()
	fs.open[c] = struct{}{}
}

func (fs *fencedFS) Create(name string) (f vfs.File, err error) {
	err = fs.change(func() error { f, err = fs.FS.Create(name); return err })
	return fs.track(f, err)
}

func (fs *fencedFS) ReuseForWrite(oldname, newname string) (f vfs.File, err error) {
	err = fs.change(func() error { f, err = fs.FS.ReuseForWrite(oldname, newname); return err })
	return fs.track(f, err)
}

func (fs *fencedFS) Open(name string, opts ...vfs.OpenOption) (f vfs.File, err error) {
	err = fs.change(func() error { f, err = fs.FS.Open(name, opts...); return err })
	return fs.track(f, err)
}

func (fs *fencedFS) OpenReadWrite(name string, opts ...vfs.OpenOption) (f vfs.File, err error) {
	err = fs.change(func() error { f, err = fs.FS.OpenReadWrite(name, opts...); return err })
	return fs.track(f, err)
}

func (fs *fencedFS) OpenDir(name string) (f vfs.File, err error) {
	err = fs.change(func() error { f, err = fs.FS.OpenDir(name); return err })
	return fs.track(f, err)
}

func (fs *fencedFS) Link(oldname, newname string) error {
	return fs.change(func() error { return fs.FS.Link(oldname, newname) })
}

func (fs *fencedFS) Remove(name string) error {
	return fs.change(func() error { return fs.FS.Remove(name) })
}

func (fs *fencedFS) RemoveAll(name string) error {
	return fs.change(func() error { return fs.FS.RemoveAll(name) })
}

func (fs *fencedFS) Rename(oldname, newname string) error {
	return fs.change(func() error { return fs.FS.Rename(oldname, newname) })
}

func (fs *fencedFS) MkdirAll(dir string, perm os.FileMode) error {
	return fs.change(func() error { return fs.FS.MkdirAll(dir, perm) })
}

// Lock takes the engine's lock on the directory; fence releases it.
func (fs *fencedFS) Lock(name string) (io.Closer, error) {
	var l io.Closer
	err := fs.change(func() (err error) { l, err = fs.FS.Lock(name); return err })
	if err != nil {
		return nil, err
	}
	c := &onceCloser{c: l}
	fs.keep(c)
	return c, nil
}

// fencedFile is a file of a fencedFS: fence closes it, and a write after
// that waits forever.
type fencedFile struct {
	vfs.File
	fs   *fencedFS
	once sync.Once
	err  error
}

func (f *fencedFile) Close() error {
	f.fs.mu.Lock()
	delete(f.fs.open, f)
	f.fs.mu.Unlock()
	f.once.Do(func() { f.err = f.File.Close() })
	return f.err
}

func (f *fencedFile) Write(p []byte) (n int, err error) {
	err = f.fs.change(func() error { n, err = f.File.Write(p); return err })
	return n, err
}

func (f *fencedFile) WriteAt(p []byte, off int64) (n int, err error) {
	err = f.fs.change(func() error { n, err = f.File.WriteAt(p, off); return err })
	return n, err
}

func (f *fencedFile) Preallocate(offset, length int64) error {
	return f.fs.change(func() error { return f.File.Preallocate(offset, length) })
}

func (f *fencedFile) Sync() error {
	return f.fs.change(f.File.Sync)
}

func (f *fencedFile) SyncData() error {
	return f.fs.change(f.File.SyncData)
}

func (f *fencedFile) SyncTo(length int64) (full bool, err error) {
	err = f.fs.change(func() error { full, err = f.File.SyncTo(length); return err })
	return full, err
}

// onceCloser closes c once, whether fence or its holder comes first:
// Pebble's lock panics when it is released twice.
type onceCloser struct {
	c    io.Closer
	once sync.Once
	err  error
}

func (o *onceCloser) Close() error {
	o.once.Do(func() { o.err = o.c.Close() })
	return o.err
}
