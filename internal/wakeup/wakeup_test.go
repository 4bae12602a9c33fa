package wakeup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestHub(t *testing.T) {
	t.Parallel()
	var h Hub
	if h.Wake("a") {
		t.Fatal("Wake with nobody waiting reported a waiter")
	}
	a1, v1, cancelA1 := h.SubscribeValue("a")
	a2, cancelA2 := h.Subscribe("a")
	b, cancelB := h.Subscribe("b")
	if h.Waiting("a") != 2 || h.Waiting("b") != 1 {
		t.Fatalf("waiting a=%d b=%d", h.Waiting("a"), h.Waiting("b"))
	}
	calls := 0
	if !h.WakeWith("a", func() any { calls++; return "outcome" }) {
		t.Fatal("WakeWith found nobody")
	}
	if !closed(a1) || !closed(a2) || closed(b) || calls != 1 || v1() != "outcome" {
		t.Fatalf("after WakeWith: a1 %v a2 %v b %v calls %d value %v", closed(a1), closed(a2), closed(b), calls, v1())
	}
	// A later subscriber waits for the next wake; canceling the woken
	// subscriptions does not touch it.
	a3, cancelA3 := h.Subscribe("a")
	cancelA1()
	cancelA2()
	cancelA2() // twice is harmless
	if closed(a3) || h.Waiting("a") != 1 {
		t.Fatalf("new subscriber: closed %v waiting %d", closed(a3), h.Waiting("a"))
	}
	if h.WakeWith("c", func() any { t.Fatal("value computed for nobody"); return nil }) {
		t.Fatal("woke c")
	}
	h.WakeAll()
	if !closed(a3) || !closed(b) {
		t.Fatal("WakeAll missed a waiter")
	}
	cancelA3()
	cancelB()
	if h.waiting.Load() != 0 || len(h.keys) != 0 {
		t.Fatalf("left %d keys", h.waiting.Load())
	}
}

func TestListener(t *testing.T) {
	t.Parallel()
	notes := make(chan string)
	connects := make(chan struct{}, 10)
	fail := make(chan struct{})
	l := NewListener(fakeConn(notes, fail, connects))
	ch, cancel, err := l.Subscribe(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	notes <- "k"
	<-ch
	// A broken connection: the listener comes back and wakes everyone.
	ch2, cancel2, err := l.Subscribe(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel2()
	fail <- struct{}{}
	select {
	case <-ch2:
	case <-time.After(10 * time.Second):
		t.Fatal("not woken by the reconnection")
	}
	if len(connects) != 2 {
		t.Fatalf("%d connections, want 2", len(connects))
	}
	l.Close()
	if _, _, err := l.Subscribe(context.Background(), "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
}

func TestListenerNotListening(t *testing.T) {
	t.Parallel()
	l := NewListener(func(ctx context.Context, ready func(), wake func(string)) error {
		return errors.New("connection refused")
	})
	l.ReadyWait = 20 * time.Millisecond
	defer l.Close()
	if _, _, err := l.Subscribe(context.Background(), "k"); !errors.Is(err, ErrNotListening) {
		t.Fatalf("%v, want ErrNotListening", err)
	}
}

// TestListenerSplit: a notification that carries a value hands it to its
// key's subscribers; one that carries none wakes them with nil, and a
// reconnection wakes everyone with nil.
func TestListenerSplit(t *testing.T) {
	t.Parallel()
	notes := make(chan string)
	fail := make(chan struct{})
	l := NewListener(fakeConn(notes, fail, nil))
	l.Split = func(p string) (string, func() any) {
		key, val, ok := strings.Cut(p, "=")
		if !ok {
			return p, nil
		}
		return key, func() any { return val }
	}
	defer l.Close()
	sub := func(key string) (<-chan struct{}, func() any, func()) {
		ch, val, cancel, err := l.SubscribeValue(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return ch, val, cancel
	}
	ch, val, cancel := sub("k")
	other, _, cancelOther := sub("other")
	defer cancelOther()
	notes <- "k=outcome"
	<-ch
	cancel()
	if v := val(); v != "outcome" {
		t.Fatalf("value %v, want outcome", v)
	}
	select {
	case <-other:
		t.Fatal("another key's subscriber was woken")
	default:
	}
	ch, val, cancel = sub("k")
	notes <- "k"
	<-ch
	cancel()
	if v := val(); v != nil {
		t.Fatalf("value %v after a notification without one, want nil", v)
	}
	fail <- struct{}{}
	select {
	case <-other:
	case <-time.After(10 * time.Second):
		t.Fatal("not woken by the reconnection")
	}
}

// fakeConn is a listener's connection that says when it (re)connects on
// connects (if not nil), delivers notes, and fails when fail is closed.
func fakeConn(notes <-chan string, fail <-chan struct{}, connects chan<- struct{}) func(ctx context.Context, ready func(), wake func(string)) error {
	return func(ctx context.Context, ready func(), wake func(string)) error {
		if connects != nil {
			connects <- struct{}{}
		}
		ready()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-fail:
				return errors.New("connection reset")
			case k := <-notes:
				wake(k)
			}
		}
	}
}
