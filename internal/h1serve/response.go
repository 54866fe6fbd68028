package h1serve

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the http.ResponseWriter of a request on the loop. A Write
// goes into the connection's buffer (as one chunk when chunked), a Flush
// sends it; nothing else buffers, so a handler that flushes each event
// sends each at once in one write.
type response struct {
	c      *conn
	req    *http.Request
	header http.Header

	wroteHeader   bool
	status        int
	chunked       bool
	noBody        bool  // HEAD, 204, 304
	contentLength int64 // -1: not given
	written       int64
	closeAfter    bool
	trailers      []string // announced in the Trailer header
	err           error    // the first write error: the connection is done
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("h1serve: invalid status code " + strconv.Itoa(code))
	}
	bw := w.c.bw
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An interim answer goes out at once, with the headers set so
		// far; the final one follows.
		w.writeStatus(code)
		w.header.Write(bw)
		bw.WriteString("\r\n")
		w.setErr(bw.Flush())
		return
	}
	w.wroteHeader = true
	w.status = code
	h := w.header
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	if cl := h.Get("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 {
			delete(h, "Content-Length") // as net/http: a bad length is not sent
		} else {
			w.contentLength = n
		}
	}
	for _, v := range h["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				w.trailers = append(w.trailers, http.CanonicalHeaderKey(k))
			}
		}
	}
	delete(h, "Transfer-Encoding")
	switch {
	case w.noBody:
	case w.contentLength >= 0:
	case w.req.ProtoAtLeast(1, 1):
		w.chunked = true
	default:
		w.closeAfter = true // HTTP/1.0 without a length: the end is the close
	}
	// A handler's "Connection: close" ends the connection after the
	// answer, as in net/http (the gateway's on a body it did not read).
	saysClose := httpguts.HeaderValuesContainsToken(h["Connection"], "close")
	if w.req.Close || w.c.s.closing.Load() || saysClose {
		w.closeAfter = true
	}
	w.writeStatus(code)
	if _, ok := h["Date"]; !ok {
		bw.WriteString("Date: ")
		bw.WriteString(httpDate())
		bw.WriteString("\r\n")
	}
	for k, vs := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) || !httpguts.ValidHeaderFieldName(k) {
			continue // a name that is not a token could split the head, as a value could
		}
		if k == "Connection" && w.closeAfter && !saysClose {
			continue // as net/http: replaced by the close below
		}
		for _, v := range vs {
			if !validValue(v) {
				continue // never a header line a value could split
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.closeAfter && !saysClose {
		bw.WriteString("Connection: close\r\n")
	}
	if !w.closeAfter && !w.req.ProtoAtLeast(1, 1) && !httpguts.HeaderValuesContainsToken(h["Connection"], "keep-alive") {
		// A 1.0 client that asked to keep the connection (else req.Close)
		// keeps it only when told so.
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")
}

func (w *response) writeStatus(code int) {
	bw := w.c.bw
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(code))
	bw.WriteString("\r\n")
}

// validValue says whether v can go into a header line as it is: no CR,
// LF or other control byte but tab.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

func (w *response) setErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	bw := w.c.bw
	if w.chunked {
		var hex [16]byte
		bw.Write(strconv.AppendInt(hex[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if w.chunked && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	w.written += int64(n)
	w.setErr(err)
	return n, err
}

func (w *response) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

// FlushError is what http.ResponseController's Flush calls.
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	w.setErr(w.c.bw.Flush())
	return w.err
}

func (w *response) Flush() { w.FlushError() }

// SetReadDeadline and SetWriteDeadline are http.ResponseController's.
func (w *response) SetReadDeadline(t time.Time) error  { return w.c.nc.SetReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

// finish ends the response (its head when none was written, the last
// chunk and the trailers) and sends it. It says whether the connection
// is still sound (the caller looks at closeAfter).
func (w *response) finish() bool {
	if !w.wroteHeader {
		if w.contentLength < 0 && w.header.Get("Content-Length") == "" && !w.req.ProtoAtLeast(1, 1) {
			w.header.Set("Content-Length", "0")
		}
		w.WriteHeader(http.StatusOK)
	}
	bw := w.c.bw
	if w.chunked && w.err == nil {
		bw.WriteString("0\r\n")
		for _, k := range w.trailers {
			if !httpguts.ValidHeaderFieldName(k) {
				continue
			}
			for _, v := range w.header[k] {
				if validValue(v) {
					bw.WriteString(k + ": " + v + "\r\n")
				}
			}
		}
		for k, vs := range w.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && httpguts.ValidHeaderFieldName(name) {
				for _, v := range vs {
					if validValue(v) {
						bw.WriteString(name + ": " + v + "\r\n")
					}
				}
			}
		}
		bw.WriteString("\r\n")
	}
	if w.err == nil {
		w.setErr(bw.Flush())
	}
	if w.err != nil {
		return false
	}
	if w.contentLength >= 0 && w.written < w.contentLength && !w.noBody {
		return false // the client waits for bytes that will never come
	}
	return true
}

// dateCache is the Date header's value, formatted once a second.
var dateCache atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	s   string
}

func httpDate() string {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &dateValue{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}
