package hooks

import "sync"

// List is the functions registered on one context, in the order they
// were added, until the context ends (Take). It has no lock of its own:
// its owner's mutex guards it, held around Add, Remove and Take, and
// passed to AfterFunc. The zero List is empty and ready to use.
type List struct {
	items  []item
	inline [2]item
	next   uint64
	ended  bool // Take was called
}

type item struct {
	id uint64
	f  func()
}

// AfterFunc is the body of a context's AfterFunc method (the one
// context.AfterFunc and the context package's child contexts look for):
// it registers f to be called when the context ends, or, if it has ended,
// calls f on a goroutine of its own, since the context package calls
// AfterFunc holding a lock that f takes. mu is the owner's mutex, not held.
func (l *List) AfterFunc(mu *sync.Mutex, f func()) (stop func() bool) {
	mu.Lock()
	if l.ended {
		mu.Unlock()
		go f()
		return func() bool { return false }
	}
	id := l.Add(f)
	mu.Unlock()
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		return l.Remove(id)
	}
}

// Add registers f and returns the id that Remove takes.
func (l *List) Add(f func()) uint64 {
	if l.items == nil {
		l.items = l.inline[:0]
	}
	l.next++
	l.items = append(l.items, item{id: l.next, f: f})
	return l.next
}

// Remove unregisters the function of id, and reports whether it was
// still registered: false once Take took it.
func (l *List) Remove(id uint64) bool {
	for i, it := range l.items {
		if it.id == id {
			n := copy(l.items[i:], l.items[i+1:])
			l.items[i+n] = item{}
			l.items = l.items[:i+n]
			return true
		}
	}
	return false
}

// Take marks the context ended and returns the functions registered, in
// order, for the owner to call once its mutex is released; nil when there
// are none.
func (l *List) Take() []func() {
	l.ended = true
	if len(l.items) == 0 {
		return nil
	}
	fs := make([]func(), len(l.items))
	for i, it := range l.items {
		fs[i] = it.f
	}
	clear(l.items)
	l.items = l.items[:0]
	return fs
}
