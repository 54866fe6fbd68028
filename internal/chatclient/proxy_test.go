package chatclient

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// killableProxy forwards TCP connections from a loopback address to a
// target until it is taken down: then the address refuses connections and
// every open one is cut, as when the control-plane's host goes away. Up
// serves the same address again.
type killableProxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex // guards ln and conns
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // the accept loop and the copying goroutines
}

func newKillableProxy(t *testing.T, target string) *killableProxy {
	t.Helper()
	p := &killableProxy{t: t, target: target, conns: make(map[net.Conn]struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() { p.Down(); p.wg.Wait() })
	return p
}

func (p *killableProxy) URL() string { return "http://" + p.addr }

func (p *killableProxy) serve(ln net.Listener) {
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

func (p *killableProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
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
func (p *killableProxy) Down() {
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
func (p *killableProxy) Up() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy up again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// watchedBuffer is an output the test waits on: each write wakes waitFor.
type watchedBuffer struct {
	mu      sync.Mutex // guards b and changed
	b       bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newWatchedBuffer() *watchedBuffer { return &watchedBuffer{changed: make(chan struct{})} }

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	return w.b.Write(p)
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// waitFor returns once the output holds s n times, failing the test when
// ctx ends first.
func (w *watchedBuffer) waitFor(ctx context.Context, t *testing.T, s string, n int) {
	t.Helper()
	for {
		w.mu.Lock()
		got, changed := w.b.String(), w.changed
		w.mu.Unlock()
		if strings.Count(got, s) >= n {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("output never held %q %d times:\n%s", s, n, got)
		}
	}
}
