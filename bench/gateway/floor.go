package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/talkide/platform/internal/h1serve"
	"github.com/talkide/platform/internal/rawio"
)

// The floor modes answer what a proxy written in Go pays before it does
// any of the gateway's work: a process of its own (this binary, run as
// `bench-gateway floor-proxy …`) that forwards each call to the simulator
// with the same raw socket I/O and one pooled upstream connection per
// call, the request sent in one write and every read of the response
// flushed at once, with no token check, budget, metering, metrics or log
// line. go-floor serves with net/http's server; go-floor-loop with the
// loop the control-plane serves the gateway's route on (internal/h1serve,
// for every path here), which has no background read of the connection.
// The gap from nginx to go-floor-loop is the language's; from there to
// cp-limit, the gateway's own.

var floorModes = map[string]string{"go-floor": "nethttp", "go-floor-loop": "loop"}

// floorMain runs the floor proxy: floor-proxy LISTEN UPSTREAM nethttp|loop.
func floorMain(args []string) error {
	if len(args) != 3 {
		return errors.New("usage: floor-proxy LISTEN UPSTREAM-HOST:PORT nethttp|loop")
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	ln = rawio.Listen(ln)
	f := &floor{upstream: args[1]}
	switch args[2] {
	case "nethttp":
		return (&http.Server{Handler: f}).Serve(ln)
	case "loop":
		loop := &h1serve.Server{Handler: f, HotPrefix: "/"}
		return (&http.Server{Handler: f}).Serve(loop.Start(ln))
	}
	return fmt.Errorf("server %q: want nethttp or loop", args[2])
}

type floor struct {
	upstream string
	mu       sync.Mutex
	idle     []*floorConn
}

type floorConn struct {
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func (f *floor) get() (*floorConn, error) {
	f.mu.Lock()
	if n := len(f.idle); n > 0 {
		c := f.idle[n-1]
		f.idle = f.idle[:n-1]
		f.mu.Unlock()
		return c, nil
	}
	f.mu.Unlock()
	nc, err := net.Dial("tcp", f.upstream)
	if err != nil {
		return nil, err
	}
	nc = rawio.Wrap(nc)
	return &floorConn{nc: nc, br: bufio.NewReaderSize(nc, 32<<10), bw: bufio.NewWriterSize(nc, 64<<10)}, nil
}

func (f *floor) put(c *floorConn) {
	f.mu.Lock()
	f.idle = append(f.idle, c)
	f.mu.Unlock()
}

// roundTrip sends the call upstream in one write and returns the
// response, whose body the caller reads to its end before putting c back.
func (f *floor) roundTrip(r *http.Request, body []byte) (*floorConn, *http.Response, error) {
	c, err := f.get()
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(c.bw, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", r.Method, r.URL.RequestURI(), f.upstream, len(body))
	for k, vs := range r.Header {
		switch k {
		case "Connection", "Content-Length", "Keep-Alive", "Transfer-Encoding", "Te", "Upgrade":
			continue
		}
		for _, v := range vs {
			c.bw.WriteString(k + ": " + v + "\r\n")
		}
	}
	c.bw.WriteString("\r\n")
	c.bw.Write(body)
	if err := c.bw.Flush(); err != nil {
		c.nc.Close()
		return nil, nil, err
	}
	res, err := http.ReadResponse(c.br, r)
	if err != nil {
		c.nc.Close()
		return nil, nil, err
	}
	return c, res, nil
}

// ServeHTTP is the floor proxy's handler, on either server.
func (f *floor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c, res, err := f.roundTrip(r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, vs := range res.Header {
		if k != "Connection" && k != "Transfer-Encoding" && k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(res.StatusCode)
	fl := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := res.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				c.nc.Close()
				return
			}
			fl.Flush()
		}
		if err == io.EOF {
			f.put(c)
			return
		}
		if err != nil {
			c.nc.Close()
			return
		}
	}
}

// startFloor starts the floor proxy of server ("nethttp" or "loop") as a
// process of its own: this binary again.
func (p *procStack) startFloor(cfg procConfig, server string) error {
	url, cmd, stop, err := startSelf("", fmt.Sprintf("%s/floor-%s.log", cfg.tmpDir, server), cfg.cpus,
		"floor-proxy", strings.TrimPrefix(cfg.simURL, "http://"), server)
	if err != nil {
		return err
	}
	p.closers = append(p.closers, stop)
	p.floors[server] = cmd
	p.floorURLs[server] = url
	return nil
}
