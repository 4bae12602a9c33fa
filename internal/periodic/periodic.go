package periodic

import (
	"sync"
	"time"
)

// Link places one item in a Queue; the item embeds it. Its zero value is
// not in any queue.
type Link[T any] struct {
	prev, next *Link[T]
	due        time.Time
	listed     bool
	v          T
}

// Queue is the items not yet due, in the order they were added. Make it
// with New.
type Queue[T any] struct {
	period time.Duration
	fire   func(due []T)

	mu         sync.Mutex
	head, tail *Link[T]    // guarded by mu
	timer      *time.Timer // guarded by mu; made on first use
	armed      bool        // guarded by mu: timer fires for the head
	closed     bool        // guarded by mu
}

// New returns a queue whose items fall due period after they are added;
// fire is called, without the queue's lock, with the items due, in order.
func New[T any](period time.Duration, fire func(due []T)) *Queue[T] {
	return &Queue[T]{period: period, fire: fire}
}

// Period is the time from adding an item to its falling due.
func (q *Queue[T]) Period() time.Duration { return q.period }

// Add puts v, through its link l, at the tail, due one period from now,
// and returns when. Once Close was called it adds nothing and reports
// false.
func (q *Queue[T]) Add(l *Link[T], v T) (due time.Time, added bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// Under the lock: the list stays in the order of its due times.
	due = time.Now().Add(q.period)
	if q.closed {
		return due, false
	}
	l.due, l.listed, l.v = due, true, v
	l.prev, l.next = q.tail, nil
	if q.tail == nil {
		q.head = l
	} else {
		q.tail.next = l
	}
	q.tail = l
	if !q.armed {
		q.armLocked(q.period)
	}
	return due, true
}

// Remove takes l out of the queue, if it is there. The timer is left
// armed: when it fires for nobody, it stops.
func (q *Queue[T]) Remove(l *Link[T]) {
	q.mu.Lock()
	if l.listed {
		q.unlinkLocked(l)
	}
	q.mu.Unlock()
}

// Close empties the queue and returns its items, in order; from then on
// Add adds nothing.
func (q *Queue[T]) Close() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	var all []T
	for l := q.head; l != nil; l = q.head {
		all = append(all, l.v)
		q.unlinkLocked(l)
	}
	return all
}

// Closed reports whether Close was called.
func (q *Queue[T]) Closed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// Len returns the number of items in the queue.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for l := q.head; l != nil; l = l.next {
		n++
	}
	return n
}

func (q *Queue[T]) unlinkLocked(l *Link[T]) {
	if l.prev == nil {
		q.head = l.next
	} else {
		l.prev.next = l.next
	}
	if l.next == nil {
		q.tail = l.prev
	} else {
		l.next.prev = l.prev
	}
	var zero T
	l.prev, l.next, l.listed, l.v = nil, nil, false, zero
}

func (q *Queue[T]) armLocked(d time.Duration) {
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.expire)
	} else {
		q.timer.Reset(d)
	}
	q.armed = true
}

// expire hands the items due to fire and arms the timer for the next.
func (q *Queue[T]) expire() {
	now := time.Now()
	q.mu.Lock()
	var due []T
	for l := q.head; l != nil && !l.due.After(now); l = q.head {
		due = append(due, l.v)
		q.unlinkLocked(l)
	}
	q.armed = false
	if q.head != nil {
		q.armLocked(q.head.due.Sub(now))
	}
	q.mu.Unlock()
	if len(due) > 0 {
		q.fire(due)
	}
}
