// Package blackhole is a TCP proxy on loopback to an apiserver that a test
// can blackhole: while it is, what it reads it drops and the connections it
// accepts are never answered, as when packets are dropped rather than
// refused. Its lifetime is the test's.
package blackhole

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is the proxy; Addr is where it listens.
type Proxy struct {
	Addr   string
	holed  atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool // the test ended: what is accepted now is closed at once
}

// Start proxies a loopback address to upstream (host:port) until t ends.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.track(c)
			if p.holed.Load() {
				p.wg.Go(func() { p.pipe(io.Discard, c) })
				continue
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				p.untrack(c)
				continue
			}
			p.track(up)
			p.wg.Go(func() { p.pipe(up, c) })
			p.wg.Go(func() { p.pipe(c, up) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.closeAll()
		p.wg.Wait()
	})
	return p
}

// Hole starts the blackhole: nothing is answered any more.
func (p *Proxy) Hole() { p.holed.Store(true) }

// Restore ends it. The connections that lived through it lost what they
// sent, so they are closed, as a peer resets them once the path is back;
// new ones reach the apiserver again.
func (p *Proxy) Restore() {
	p.closeAll()
	p.holed.Store(false)
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return
	}
	p.conns[c] = true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	_ = c.Close()
}

// pipe copies from to to until from ends, dropping while holed.
func (p *Proxy) pipe(to io.Writer, from net.Conn) {
	defer func() {
		if c, ok := to.(net.Conn); ok {
			p.untrack(c)
		}
		p.untrack(from)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !p.holed.Load() {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
