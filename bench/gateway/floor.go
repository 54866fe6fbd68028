package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// The floor mode (go-floor) answers what a proxy written in Go on the
// standard library pays before it does any of the gateway's work: a
// process of its own (this binary, run as `bench-gateway floor-proxy …`)
// that serves with net/http's server and forwards each call to the
// simulator through httputil.ReverseProxy and an http.Transport set as the
// gateway's (HTTP/1.1, an idle connection kept for every stream, no
// compression asked for), every read of the response flushed at once,
// with no token check, budget, metering, metrics or log line. The gap
// from nginx to go-floor is the language's and its library's; from there
// to cp-limit, the gateway's own.

// floorMain runs the floor proxy: floor-proxy LISTEN UPSTREAM-HOST:PORT.
func floorMain(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: floor-proxy LISTEN UPSTREAM-HOST:PORT")
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	up := &url.URL{Scheme: "http", Host: args[1]}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 4096, 4096
	t.DisableCompression = true
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(up); pr.Out.Host = "" },
		Transport:     t,
		FlushInterval: -1,
	}
	// The transport still reads the request's body (its last read, the one
	// that finds the end) when the upstream's answer comes, and net/http's
	// server closes a body it has not seen the end of once the handler
	// writes its answer: the transport's read then fails and takes the
	// upstream connection down mid-stream. Full duplex leaves the body open.
	// (The gateway reads the body whole before it forwards it, as nginx
	// does by default.)
	return (&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		rp.ServeHTTP(w, r)
	})}).Serve(ln)
}

// startFloor starts the floor proxy as a process of its own: this binary
// again.
func (p *procStack) startFloor(cfg procConfig) error {
	url, cmd, stop, err := startSelf("", cfg.tmpDir+"/floor.log", cfg.cpus, "floor-proxy", strings.TrimPrefix(cfg.simURL, "http://"))
	if err != nil {
		return err
	}
	p.closers = append(p.closers, stop)
	p.floor, p.floorURL = cmd, url
	return nil
}
