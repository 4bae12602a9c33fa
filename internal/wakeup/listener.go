package wakeup

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNotListening: the listener is not connected now, so a subscription
// would not be woken; the caller polls instead.
var ErrNotListening = errors.New("wakeup: not listening for notifications")

// ErrClosed: the listener was closed.
var ErrClosed = errors.New("wakeup: listener closed")

// ListenFunc connects to the backend, subscribes, calls ready once
// notifications flow, then hands each one's key to wake, until its
// connection fails or ctx is done. It returns what ended it.
type ListenFunc func(ctx context.Context, ready func(), wake func(key string)) error

// Listener keeps one connection per store listening for notifications
// (PostgreSQL LISTEN, Redis SUBSCRIBE), started by the first subscriber,
// reconnecting with backoff, and wakes the subscribers of each key
// notified. After a reconnection it wakes everyone, since notifications
// sent while it was away are lost.
type Listener struct {
	listen ListenFunc
	// ReadyWait bounds how long Subscribe waits for the connection when it
	// is not listening yet; 0 means 250 ms.
	ReadyWait time.Duration
	// Split, when set, reads a notification that carries a value for its
	// key's subscribers (SubscribeValue): it returns the key, and a
	// function that decodes the value, called only when someone waits (nil
	// when the notification carries none). Without Split the whole
	// notification is the key.
	Split func(payload string) (key string, val func() any)

	hub       Hub
	mu        sync.Mutex
	ready     chan struct{}      // closed while listening; guarded by mu
	listening bool               // guarded by mu
	closed    bool               // guarded by mu
	cancel    context.CancelFunc // guarded by mu; nil until started
	done      chan struct{}      // guarded by mu; closed when the loop ends
}

// NewListener returns a listener that connects with listen when first
// needed.
func NewListener(listen ListenFunc) *Listener {
	return &Listener{listen: listen, ready: make(chan struct{})}
}

// Subscribe returns a channel closed when key is notified, or by a
// reconnection, and the function that ends the subscription. It starts
// the listener if needed and waits for it, up to ctx and ReadyWait; if it
// is still not listening then, it returns ErrNotListening.
func (l *Listener) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	ch, _, cancel, err := l.SubscribeValue(ctx, key)
	return ch, cancel, err
}

// SubscribeValue is Subscribe, plus a function that returns, once the
// channel is closed, the value the waking notification carried (see
// Split), or nil.
func (l *Listener) SubscribeValue(ctx context.Context, key string) (<-chan struct{}, func() any, func(), error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, nil, ErrClosed
	}
	if l.cancel == nil {
		lctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.loop(lctx, l.done)
	}
	ready, listening := l.ready, l.listening
	l.mu.Unlock()
	if !listening {
		wait := l.ReadyWait
		if wait <= 0 {
			wait = 250 * time.Millisecond
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, nil, nil, ctx.Err()
		case <-t.C:
			return nil, nil, nil, ErrNotListening
		}
	}
	ch, val, cancel := l.hub.SubscribeValue(key)
	return ch, val, cancel, nil
}

// Close stops the listener and waits for its connection to end; it wakes
// every subscriber, who then polls.
func (l *Listener) Close() {
	l.mu.Lock()
	l.closed = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	l.hub.WakeAll()
}

func (l *Listener) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	const minBackoff, maxBackoff = 50 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for {
		connected := false
		_ = l.listen(ctx, func() { connected = true; l.setListening(true) }, l.wake)
		l.setListening(false)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = minBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// wake wakes the subscribers of a notification's key, handing them its
// value when it carries one.
func (l *Listener) wake(payload string) {
	if l.Split == nil {
		l.hub.Wake(payload)
		return
	}
	l.hub.WakeWith(l.Split(payload))
}

func (l *Listener) setListening(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := l.listening
	switch {
	case on && !was:
		// Anyone subscribed before a reconnection may have missed their
		// notification: wake them all to read their records again. Before
		// the gate opens, so that no one subscribing now is woken for
		// nothing.
		l.hub.WakeAll()
		close(l.ready)
	case !on && was:
		l.ready = make(chan struct{})
	}
	l.listening = on
}

// Listening reports whether the connection is listening now.
func (l *Listener) Listening() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.listening
}
