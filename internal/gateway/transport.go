package gateway

import (
	"context"
	"net"
	"net/http"
)

// DefaultMaxIdleConns is how many idle connections to the upstream the
// default Transport keeps.
//
// http.DefaultTransport keeps two per host: with more streams than that
// running at once, most calls found no idle connection and opened a new
// one, and the surplus was closed again as calls ended (bench/gateway: 0.5
// new connections per call at 16 concurrent streams, 0.7–0.8 at 256). To
// api.anthropic.com each of those is a TCP and TLS handshake on the way of
// a call. Idle connections still close after the Transport's
// IdleConnTimeout (90 s).
const DefaultMaxIdleConns = 1024

// newTransport is the default Transport: http.DefaultTransport's settings
// (its dial and TLS timeouts, the proxy from the environment), with room
// for DefaultMaxIdleConns idle connections to the upstream, over HTTP/1.1
// only, without compression, its connections read and written raw
// (rawConn).
//
// HTTP/1.1 because a stream then has a connection of its own, whose
// events the handler's goroutine reads straight off the socket; over
// HTTP/2 every event of every stream would pass through the connection's
// one reader goroutine, a hand-off per event, and a hundred streams would
// share one connection's flow-control window. api.anthropic.com serves
// both.
//
// Without compression because the gateway reads every event as it passes
// and the worker's client gets it plain anyway: a gzip stream would be
// inflated here, event by event, for nothing.
//
// A client's "Expect: 100-continue" goes upstream as the client sent it,
// but the body follows at once: the gateway holds all of it already, and
// waiting for the upstream's 100 would put up to a second on the call.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = DefaultMaxIdleConns
	t.MaxIdleConnsPerHost = DefaultMaxIdleConns
	t.DisableCompression = true
	t.ExpectContinueTimeout = 0
	t.ForceAttemptHTTP2 = false
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	dial := t.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrap(c, true), nil
	}
	return t
}
