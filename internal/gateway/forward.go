package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// The gateway forwards a call itself rather than through
// httputil.ReverseProxy, which costs a proxy of one upstream what it does
// not need: a deep copy of the inbound request, and, to flush the response
// at once, a timer that fires as the copy starts (waking the runtime's
// poller thread, then a goroutine that flushes the head under a mutex
// that every later write takes too). On an otherwise idle machine each of
// those was a sleeping thread woken per call (bench/gateway against nginx).

// hopHeaders are the hop-by-hop headers (RFC 9110, section 7.6.1, and the
// ones older proxies used): they concern one connection and are not
// forwarded, in either direction. Canonical keys.
var hopHeaders = map[string]bool{
	"Connection":          true,
	"Proxy-Connection":    true,
	"Keep-Alive":          true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
}

// forwardedHeaders are what other proxies add about the client; the
// gateway passes on none of them (the upstream learns nothing of workers).
var forwardedHeaders = map[string]bool{
	"Forwarded":         true,
	"X-Forwarded-For":   true,
	"X-Forwarded-Host":  true,
	"X-Forwarded-Proto": true,
}

// connectionTokens returns the header names a Connection header lists:
// those are hop-by-hop too.
func connectionTokens(h http.Header) map[string]bool {
	vs := h["Connection"]
	if len(vs) == 0 {
		return nil
	}
	named := map[string]bool{}
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				named[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	return named
}

// upstreamURLs holds the upstream URL of each forwarded path, made once:
// the transport only reads a request's URL.
func upstreamURLs(upstream *url.URL) map[string]*url.URL {
	m := make(map[string]*url.URL, len(forwarded))
	for p := range forwarded {
		m[p] = &url.URL{Scheme: upstream.Scheme, Host: upstream.Host, Path: strings.TrimSuffix(upstream.Path, "/") + p}
	}
	return m
}

// outgoing is the upstream request for the call c of the inbound r: the
// held body, the headers less the hop-by-hop, the denied and the
// forwarded ones, and the API key.
func (g *Gateway) outgoing(ctx context.Context, r *http.Request, c *call) *http.Request {
	named := connectionTokens(r.Header)
	h := make(http.Header, len(r.Header)+2)
	for k, vs := range r.Header {
		if hopHeaders[k] || forwardedHeaders[k] || named[k] || denied(k) {
			continue
		}
		h[k] = vs // the inbound request's values are not changed after this
	}
	for _, v := range r.Header["Te"] {
		if strings.Contains(strings.ToLower(v), "trailers") {
			h["Te"] = []string{"trailers"} // the one TE a proxy passes on
			break
		}
	}
	h["X-Api-Key"] = []string{g.apiKey}
	if h.Get("Anthropic-Version") == "" {
		h["Anthropic-Version"] = []string{anthropicVersion}
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""} // not Go's own: the client's, or none
	}
	out := (&http.Request{
		Method:     http.MethodPost,
		URL:        g.urls[c.path],
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
	}).WithContext(ctx)
	if n := c.body.len(); n > 0 {
		out.Body = c.body.reader()
		out.GetBody = c.body.getBody
		out.ContentLength = int64(n)
	}
	return out
}

// errSwitched is an upstream that answered 101 through http.Transport (the
// direct transport refuses it itself): no protocol switch passes.
var errSwitched = errors.New("gateway: the upstream switched protocols")

// forward sends the call upstream and copies the answer to w: the head,
// then each read of the body as it comes, flushed. A body that fails
// mid-copy (the upstream broke off, the client went away) aborts the
// response with http.ErrAbortHandler, so the client sees it incomplete
// rather than ended; the call is recorded by the deferred finish either
// way.
func (g *Gateway) forward(w http.ResponseWriter, out *http.Request, c *call) {
	if g.metrics != nil {
		g.metrics.ForwardLatency(g.now().Sub(c.rec.StartedAt))
	}
	res, err := g.transport.RoundTrip(out)
	if err == nil && res.StatusCode == http.StatusSwitchingProtocols {
		res.Body.Close()
		err = errSwitched
	}
	if err != nil {
		g.proxyError(w, c, err)
		return
	}
	// What has come of the body with the head: when nothing has, the head
	// is flushed alone, so that the client has it while the upstream
	// thinks; when something has, it goes out with the first write.
	early := false
	if db, ok := res.Body.(*directBody); ok {
		early = db.buffered() > 0
	}
	g.modifyResponse(c, res)
	dst := w.Header()
	named := connectionTokens(res.Header)
	for k, vs := range res.Header {
		if hopHeaders[k] || named[k] {
			continue
		}
		// The response's own values, not a copy of each (an allocation
		// per header per call), capped so that an append (a trailer of
		// the same name) makes a copy instead of writing into them.
		if have := dst[k]; have != nil {
			dst[k] = append(have, vs...)
		} else {
			dst[k] = vs[:len(vs):len(vs)]
		}
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		dst.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)
	rc := http.NewResponseController(w)
	if !early {
		if err := rc.Flush(); err != nil {
			res.Body.Close()
			panic(http.ErrAbortHandler)
		}
	}
	if err := g.copyBody(w, rc, res.Body); err != nil {
		res.Body.Close() // drains into the meter, for the charge
		panic(http.ErrAbortHandler)
	}
	res.Body.Close() // populates res.Trailer
	if len(res.Trailer) == 0 {
		return
	}
	rc.Flush()
	for k, vs := range res.Trailer {
		if len(res.Trailer) != announced {
			k = http.TrailerPrefix + k
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// copyBody writes each read of body to w and flushes it. It returns the
// first error of either side but the body's end.
func (g *Gateway) copyBody(w http.ResponseWriter, rc *http.ResponseController, body io.Reader) error {
	buf := g.buffers.Get()
	defer g.buffers.Put(buf)
	for {
		n, rerr := body.Read(buf)
		if rerr != nil && rerr != io.EOF && !errors.Is(rerr, context.Canceled) {
			g.log.Warn("gateway: the upstream's body failed mid-copy", "err", rerr)
		}
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if err := rc.Flush(); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
