// Package proxytest is a TCP proxy for tests that can be taken down and
// brought back on the same address: a server's host going away and coming
// back, as the clients see it. In front of several targets it is a load
// balancer: each connection goes to the next target in turn, or to the one
// after it when that one refuses (a replica that died).
package proxytest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections from a loopback address to a
// target until it is taken down: then the address refuses connections and
// every open one is cut, as when the control-plane's host goes away. Up
// serves the same address again.
type Proxy struct {
	t       *testing.T
	targets []string
	addr    string
	next    atomic.Uint64 // the target the next connection tries first

	mu    sync.Mutex // guards ln and conns
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // the accept loop and the copying goroutines
}

// New starts a proxy to target on a loopback port; the tests cleanup
// takes it down.
func New(t *testing.T, target string) *Proxy { return NewBalancer(t, target) }

// NewBalancer starts a proxy to several targets on a loopback port: each
// connection goes to the next target in turn, and on to the following
// ones while they refuse it; only when every target refuses is the
// connection closed. A connection stays with its target (HTTP keep-alive
// and event streams included) until either side ends it.
func NewBalancer(t *testing.T, targets ...string) *Proxy {
	t.Helper()
	if len(targets) == 0 {
		t.Fatal("proxytest: no target")
	}
	p := &Proxy{t: t, targets: targets, conns: make(map[net.Conn]struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() { p.Down(); p.wg.Wait() })
	return p
}

// URL is the proxy's address as an http:// URL.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Addr is the proxy's address, HOST:PORT.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.forward(c)
		}
	}()
}

// dial connects to the next target in turn that accepts.
func (p *Proxy) dial() (net.Conn, error) {
	first := p.next.Add(1) - 1
	var err error
	for i := range uint64(len(p.targets)) {
		var up net.Conn
		if up, err = net.Dial("tcp", p.targets[(first+i)%uint64(len(p.targets))]); err == nil {
			return up, nil
		}
	}
	return nil, err
}

func (p *Proxy) forward(c net.Conn) {
	up, err := p.dial()
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // taken down meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		defer p.wg.Done()
		io.Copy(dst, src)
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}
	p.wg.Add(2)
	go pipe(up, c)
	go pipe(c, up)
}

// Down closes the listener and cuts every connection.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// Up listens on the same address again.
func (p *Proxy) Up() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy up again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}
