package replicas

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Forwarder is a TCP forwarder: what connects to it is connected to its
// target. In front of a store's servers it stands for a virtual IP, which
// Switch moves to another server; on a replication link it delays every
// byte by a fixed time, in both directions, as a link across a network
// does, and Cut drops what is still in flight.
type Forwarder struct {
	l     net.Listener
	delay time.Duration

	mu     sync.Mutex
	target string // "": down, a connection is accepted and closed
	conns  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// link is one forwarded connection: the accepted side and the dialed one.
type link struct {
	a, b net.Conn
	once sync.Once
	done chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.a.Close()
		_ = l.b.Close()
	})
}

// NewForwarder listens on a spare port of 127.0.0.1 and forwards to target
// ("" for none yet), delaying each direction by delay. It is closed when t
// ends.
func NewForwarder(t testing.TB, target string, delay time.Duration) *Forwarder {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Forwarder{l: l, delay: delay, target: target, conns: map[*link]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.Close)
	return f
}

// Addr is the forwarder's HOST:PORT.
func (f *Forwarder) Addr() string { return f.l.Addr().String() }

// Port is the forwarder's port.
func (f *Forwarder) Port() int { return f.l.Addr().(*net.TCPAddr).Port }

// Switch closes every forwarded connection, dropping what is in flight,
// and sends the connections made from now on to target ("" for none: they
// are closed at once, as a connection to an address nobody holds fails).
func (f *Forwarder) Switch(target string) {
	f.mu.Lock()
	f.target = target
	conns := f.conns
	f.conns = map[*link]struct{}{}
	f.mu.Unlock()
	for c := range conns {
		c.close()
	}
}

// Cut is Switch(""): the link is down.
func (f *Forwarder) Cut() { f.Switch("") }

// Close stops the forwarder and closes its connections.
func (f *Forwarder) Close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	_ = f.l.Close()
	f.Cut()
	f.wg.Wait()
}

func (f *Forwarder) accept() {
	defer f.wg.Done()
	for {
		a, err := f.l.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		target, closed := f.target, f.closed
		f.mu.Unlock()
		if target == "" || closed {
			_ = a.Close()
			continue
		}
		b, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			_ = a.Close()
			continue
		}
		c := &link{a: a, b: b, done: make(chan struct{})}
		f.mu.Lock()
		if f.target != target || f.closed {
			// Switched while dialing: this connection belongs to the old
			// target.
			f.mu.Unlock()
			c.close()
			continue
		}
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(c, a, b)
		go f.pipe(c, b, a)
	}
}

// chunk is bytes read at a time, due at the other side delay later.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each read delivered delay after it was read;
// when the connection is closed the chunks not yet delivered are dropped.
func (f *Forwarder) pipe(c *link, src, dst net.Conn) {
	defer f.wg.Done()
	defer c.close()
	if f.delay <= 0 {
		_, _ = io.Copy(dst, src)
		return
	}
	q := make(chan chunk, 1<<14)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer c.close()
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			var ch chunk
			select {
			case ch = <-q:
			case <-c.done:
				return
			}
			if wait := time.Until(ch.due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-c.done:
					return
				}
			}
			if _, err := dst.Write(ch.b); err != nil {
				return
			}
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case q <- chunk{b: buf[:n], due: time.Now().Add(f.delay)}:
			case <-c.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// spare returns a TCP port of 127.0.0.1 that nothing listens on right now.
func spare(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func hostPort(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
