package rpctest

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections to a server and loses one answer in
// LoseEvery: it forwards the request, lets the server run it, and closes
// both sides of the connection instead of forwarding the answer's first
// frame (HTTP/2: the first HEADERS frame of a stream; HTTP/1.1: the first
// byte of a connection's first response, so a client should not keep
// connections alive). The client sees its connection fail after the call
// ran, the fault idem is for; the other calls in flight on the connection
// fail with it.
type Proxy struct {
	Addr string
	// LoseEvery loses one answer in LoseEvery; 0 loses none. Set it
	// before the proxy is used.
	LoseEvery int

	ln      net.Listener
	answers atomic.Int64
	lost    atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	open    map[net.Conn]bool
}

// NewProxy listens on a free port of 127.0.0.1 and forwards to target; it
// closes when t ends.
func NewProxy(t testing.TB, target string, loseEvery int) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), LoseEvery: loseEvery, ln: ln, open: map[net.Conn]bool{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c, target)
			}()
		}
	}()
	t.Cleanup(p.Close)
	return p
}

// Lost returns how many answers the proxy lost.
func (p *Proxy) Lost() int { return int(p.lost.Load()) }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.open {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == nil {
		return false
	}
	p.open[c] = true
	return true
}

func (p *Proxy) serve(client net.Conn, target string) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	p.track(client)
	p.track(server)
	defer func() {
		p.mu.Lock()
		delete(p.open, client)
		delete(p.open, server)
		p.mu.Unlock()
	}()
	h2 := make(chan bool, 1)
	done := make(chan struct{}, 2)
	go func() {
		// client -> server: note whether it speaks HTTP/2 (its preface).
		var first [3]byte
		n, err := io.ReadFull(client, first[:])
		h2 <- n == 3 && string(first[:]) == "PRI"
		if err == nil {
			if _, err = server.Write(first[:n]); err == nil {
				_, _ = io.Copy(server, client)
			}
		}
		server.Close()
		done <- struct{}{}
	}()
	go func() {
		defer func() { client.Close(); done <- struct{}{} }()
		if p.LoseEvery <= 0 {
			_, _ = io.Copy(client, server)
			return
		}
		if p.forwardUntilLost(client, server, <-h2) {
			p.lost.Add(1)
		}
	}()
	<-done
	<-done
}

// lose counts an answer and says whether to lose it.
func (p *Proxy) lose() bool { return p.answers.Add(1)%int64(p.LoseEvery) == 0 }

// forwardUntilLost forwards server's bytes to client until an answer is to
// be lost, and reports whether one was.
func (p *Proxy) forwardUntilLost(client, server net.Conn, h2 bool) bool {
	if !h2 {
		var b [1]byte
		if _, err := io.ReadFull(server, b[:]); err != nil {
			return false
		}
		if p.lose() {
			return true
		}
		if _, err := client.Write(b[:]); err == nil {
			_, _ = io.Copy(client, server)
		}
		return false
	}
	seen := map[uint32]bool{}
	var hdr [9]byte
	var frame bytes.Buffer
	for {
		if _, err := io.ReadFull(server, hdr[:]); err != nil {
			return false
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, stream := hdr[3], binary.BigEndian.Uint32(hdr[5:])&0x7fffffff
		if typ == 0x1 && stream != 0 && !seen[stream] { // an answer's first HEADERS
			seen[stream] = true
			if p.lose() {
				return true
			}
		}
		frame.Reset()
		frame.Write(hdr[:])
		if _, err := io.CopyN(&frame, server, int64(length)); err != nil {
			return false
		}
		if _, err := client.Write(frame.Bytes()); err != nil {
			return false
		}
	}
}
