package idemclient

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Pending is a request whose outcome has not been seen. Its identity in
// the outbox is (Scope, Method, URL, Key): the mobile app's server scopes
// keys per user and endpoint, so the same key may be pending for two users
// or on two endpoints at once.
type Pending struct {
	// Scope tells apart callers that may share a key (Transport.Scope).
	Scope  string      `json:"scope,omitempty"`
	Key    string      `json:"idempotency_key"`
	Method string      `json:"method"`
	URL    string      `json:"url"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Created is when the request was first stored.
	Created time.Time `json:"timestamp"`
	// KeyExpires, when set, is when the server forgets the key, on this
	// client's clock, as its last answer told (see KeyExpires):
	// SendPending drops the request unsent after it (ErrKeyExpired).
	KeyExpires time.Time `json:"key_expires_at,omitzero"`

	// file is the name List read p from: entries written by older versions
	// are named by their key alone, and must be removed under that name.
	file string
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

// ID is p's identity in the outbox: a digest of its scope, method, URL and
// key. It is store.HashKey("outbox", ...), the name outboxes have always
// used (a test holds them equal), written out here so that the client does
// not import the store contract.
func (p Pending) ID() string {
	sum := sha256.Sum256([]byte("outbox:" + p.Scope + "\x00" + p.Method + "\x00" + p.URL + "\x00" + p.Key))
	return hex.EncodeToString(sum[:])
}

// File names are the ID: keys and URLs may hold any text.
func (o *Outbox) path(p Pending) string {
	if p.file != "" {
		return filepath.Join(o.dir, p.file)
	}
	return filepath.Join(o.dir, p.ID()+".json")
}

// Put stores p durably, replacing a request with the same ID.
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
	p.file = "" // Put always writes under the ID
	if err := os.Rename(tmp.Name(), o.path(p)); err != nil {
		return fmt.Errorf("idemclient: outbox: %w", err)
	}
	return syncDir(o.dir)
}

// Remove deletes the request with p's ID; a missing one is not an error.
func (o *Outbox) Remove(p Pending) error {
	err := os.Remove(o.path(p))
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
		p.file = e.Name()
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

// Result is what SendPending did with one pending request: its outcome
// (Response, its body in memory; close it all the same) or why it has none
// (Err, an *Error or ErrExpired; the request stays pending unless it
// expired, its key expired (ErrKeyExpired) or it was refused with
// ErrConflict).
type Result struct {
	Pending  Pending
	Response *http.Response
	Err      error
}
