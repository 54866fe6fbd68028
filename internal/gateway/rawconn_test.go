package gateway

import (
	"net"
	"sync"
)

// connRecorder is a listener that keeps what it accepted.
type connRecorder struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *connRecorder) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *connRecorder) accepted() []net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]net.Conn(nil), l.conns...)
}
