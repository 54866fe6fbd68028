package gateway

import (
	"bufio"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// writeHeld writes a gateway call's upstream request, as outgoing makes it
// (a POST of a held body, without trailers), as Request.Write would but
// for the order of its header lines: the map's, not sorted. On a cold
// cache Request.Write (its sorted slice of the header's keys, its
// transferWriter, the checks of a request it may be given) was about 10
// µs of a call's first byte. It reports false, having written nothing,
// for any request it would write differently from Request.Write (another
// shape, or a header that Request.Write would rewrite), which
// Request.Write writes then.
func writeHeld(bw *bufio.Writer, req *http.Request) (bool, error) {
	hr, ok := req.Body.(*heldReader)
	if !ok || hr.off != 0 || req.Method != http.MethodPost || req.ContentLength <= 0 ||
		req.Host != "" || req.Close || len(req.TransferEncoding) > 0 || req.Trailer != nil {
		return false, nil
	}
	host := req.URL.Host
	if !plainHost(host) {
		return false, nil
	}
	uri := req.URL.RequestURI()
	if !plainTarget(uri) {
		return false, nil // Request.Write refuses it, or sends it unreadably
	}
	ua, ok := req.Header["User-Agent"]
	if !ok {
		return false, nil // Request.Write sends Go's own
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false, nil
		}
		for _, v := range vs {
			if !plainValue(v) {
				return false, nil
			}
		}
	}
	bw.WriteString("POST ")
	bw.WriteString(uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	if len(ua) > 0 && ua[0] != "" {
		bw.WriteString("User-Agent: ")
		bw.WriteString(ua[0])
		bw.WriteString("\r\n")
	}
	bw.WriteString("Content-Length: ")
	var num [20]byte
	bw.Write(strconv.AppendInt(num[:0], req.ContentLength, 10))
	bw.WriteString("\r\n")
	for k, vs := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // Request.Write's own, or none
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
	hr.h.mu.Lock()
	b := hr.h.b
	hr.h.mu.Unlock()
	if b == nil {
		return true, errBodyReleased
	}
	if int64(len(b)) != req.ContentLength {
		return true, errBodyLength
	}
	hr.off = len(b)
	_, err := bw.Write(b)
	return true, err
}

var errBodyLength = errors.New("gateway: the request body's length is not its Content-Length")

// plainHost says whether Request.Write would send host as it is: a valid
// Host header of ASCII, without an IPv6 zone.
func plainHost(host string) bool {
	if host == "" || !httpguts.ValidHostHeader(host) {
		return false
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c >= 0x80 || c == '%' {
			return false
		}
	}
	return true
}

// plainTarget says whether a request target has no space or control
// byte, which would split or end the request line.
func plainTarget(uri string) bool {
	for i := 0; i < len(uri); i++ {
		if c := uri[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return uri != ""
}

// plainValue says whether Request.Write would send a header value as it
// is: no CR or LF (which it turns into spaces) nor another control byte
// but tab, and no space or tab at either end (which it trims).
func plainValue(v string) bool {
	return httpguts.ValidHeaderFieldValue(v) && strings.Trim(v, " \t") == v
}
