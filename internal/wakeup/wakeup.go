// Package wakeup wakes the callers waiting for a key, the way
// golang.org/x/sync/singleflight merges the callers of one key: one channel
// per key with waiters, closed once to wake them all. The engine uses it for
// waiters in its own process, and the stores' Notifier implementations for
// the notifications they receive from other processes.
package wakeup

import (
	"sync"
	"sync/atomic"
)

// Hub holds the waiters of every key. Its zero value is ready to use.
type Hub struct {
	// waiting counts keys with waiters, so that Wake, which runs at the end
	// of every call, costs one atomic load when nobody waits.
	waiting atomic.Int64
	mu      sync.Mutex
	keys    map[string]*entry // guarded by mu
}

type entry struct {
	ch   chan struct{}
	refs int // guarded by Hub.mu
	// val is what WakeWith handed over; written before ch is closed, read
	// after.
	val any
}

// Subscribe returns a channel closed by the next Wake of key, and a
// function that ends the subscription; call it once.
func (h *Hub) Subscribe(key string) (<-chan struct{}, func()) {
	ch, _, cancel := h.SubscribeValue(key)
	return ch, cancel
}

// SubscribeValue is Subscribe, plus a function that returns, once the
// channel is closed, the value WakeWith handed over (nil after Wake).
func (h *Hub) SubscribeValue(key string) (<-chan struct{}, func() any, func()) {
	h.mu.Lock()
	if h.keys == nil {
		h.keys = make(map[string]*entry)
	}
	e := h.keys[key]
	if e == nil {
		e = &entry{ch: make(chan struct{})}
		h.keys[key] = e
		h.waiting.Add(1)
	}
	e.refs++
	h.mu.Unlock()
	var once sync.Once
	return e.ch, func() any { return e.val }, func() {
		once.Do(func() {
			h.mu.Lock()
			e.refs--
			// A woken entry has left the map already.
			if e.refs == 0 && h.keys[key] == e {
				delete(h.keys, key)
				h.waiting.Add(-1)
			}
			h.mu.Unlock()
		})
	}
}

// Wake wakes every waiter of key; later subscribers wait for the next Wake.
// It reports whether anyone was waiting.
func (h *Hub) Wake(key string) bool { return h.WakeWith(key, nil) }

// WakeWith is Wake, handing the waiters what val returns; val is called
// only when someone waits (so that it can copy what the waiters need,
// which the caller may reuse once WakeWith returns).
func (h *Hub) WakeWith(key string, val func() any) bool {
	if h.waiting.Load() == 0 {
		return false
	}
	h.mu.Lock()
	e := h.keys[key]
	if e != nil {
		delete(h.keys, key)
		h.waiting.Add(-1)
	}
	h.mu.Unlock()
	if e == nil {
		return false
	}
	if val != nil {
		e.val = val()
	}
	close(e.ch)
	return true
}

// WakeAll wakes every waiter of every key: a listener that reconnects may
// have missed notifications, and a waiter woken for nothing only re-reads
// its record.
func (h *Hub) WakeAll() {
	h.mu.Lock()
	keys := h.keys
	h.keys = nil
	h.waiting.Store(0)
	h.mu.Unlock()
	for _, e := range keys {
		close(e.ch)
	}
}

// Waiting returns how many subscriptions key has (tests use it to know
// that a waiter is parked).
func (h *Hub) Waiting(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.keys[key]; e != nil {
		return e.refs
	}
	return 0
}
