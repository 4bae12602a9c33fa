package idemclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/idem-dev/idem/store"
)

// Pending is a request whose final response has not been seen.
type Pending struct {
	Key    string      `json:"idempotency_key"`
	Method string      `json:"method"`
	URL    string      `json:"url"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Created is when the request was first stored.
	Created time.Time `json:"timestamp"`
}

// Outbox keeps pending requests durably: one file per request in a
// directory, written to a temporary file, synced and renamed, so a crash
// leaves either the whole request or nothing.
type Outbox struct {
	dir string
}

// OpenOutbox opens (creating it if needed) the outbox in dir.
func OpenOutbox(dir string) (*Outbox, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("idemclient: outbox: %w", err)
	}
	return &Outbox{dir: dir}, nil
}

// File names are the key's hash: keys may hold any printable text.
func (o *Outbox) path(key string) string {
	return filepath.Join(o.dir, store.HashKey("outbox", key)+".json")
}

// Put stores p durably, replacing a request with the same key.
func (o *Outbox) Put(p Pending) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(o.dir, ".pending-*")
	if err != nil {
		return fmt.Errorf("idemclient: outbox: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("idemclient: outbox: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("idemclient: outbox: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), o.path(p.Key)); err != nil {
		return fmt.Errorf("idemclient: outbox: %w", err)
	}
	return syncDir(o.dir)
}

// Remove deletes the request with key; a missing one is not an error.
func (o *Outbox) Remove(key string) error {
	err := os.Remove(o.path(key))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("idemclient: outbox: %w", err)
	}
	return syncDir(o.dir)
}

// List returns the pending requests, oldest first. Unreadable files are
// skipped and reported in the error.
func (o *Outbox) List() ([]Pending, error) {
	entries, err := os.ReadDir(o.dir)
	if err != nil {
		return nil, fmt.Errorf("idemclient: outbox: %w", err)
	}
	var out []Pending
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(o.dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var p Pending
		if err := json.Unmarshal(b, &p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.Name(), err))
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	// Some file systems cannot sync a directory; the rename is then as
	// durable as they make it.
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
