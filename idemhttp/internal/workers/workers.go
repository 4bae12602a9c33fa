package workers

import "time"

// Pool hands functions to idle workers, and starts a worker when none is
// idle. Its zero value is not usable; call New.
type Pool struct {
	idle time.Duration
	work chan func()
}

// New returns a pool whose workers exit after idle without work.
func New(idle time.Duration) *Pool {
	return &Pool{idle: idle, work: make(chan func())}
}

// Go runs f on a worker: one waiting for work if there is one, a new one
// otherwise. It never waits.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		go p.loop(f)
	}
}

func (p *Pool) loop(f func()) {
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		f()
		f = nil // let it go while idle
		t.Reset(p.idle)
		select {
		case f = <-p.work:
		case <-t.C:
			return
		}
	}
}
