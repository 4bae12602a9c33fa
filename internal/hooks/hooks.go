package hooks

// List is the functions registered on one context, in the order they
// were added. It has no lock: its owner holds its own around every call.
// The zero List is empty and ready to use.
type List struct {
	items  []item
	inline [2]item
	next   uint64
}

type item struct {
	id uint64
	f  func()
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

// Take returns the functions registered, in order, and empties the list;
// nil when there are none.
func (l *List) Take() []func() {
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
