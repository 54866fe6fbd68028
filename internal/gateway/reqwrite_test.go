package gateway

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// heldRequest is a request as outgoing makes it, to u, with h and body.
func heldRequest(t testing.TB, u string, h http.Header, body string) *http.Request {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	hb := &heldBody{b: []byte(body), size: len(body)}
	return &http.Request{Method: http.MethodPost, URL: pu, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: hb.reader(), ContentLength: int64(len(body))}
}

// sameOnTheWire says whether two requests' bytes read back as the same
// request: method, target, Host, headers (each one's values in order),
// length and body.
func sameOnTheWire(t testing.TB, a, b []byte) bool {
	t.Helper()
	ra, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(a)))
	if err != nil {
		t.Fatalf("reading %q: %v", a, err)
	}
	rb, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("reading %q: %v", b, err)
	}
	ba, _ := io.ReadAll(ra.Body)
	bb, _ := io.ReadAll(rb.Body)
	return ra.Method == rb.Method && ra.RequestURI == rb.RequestURI && ra.Host == rb.Host &&
		ra.ContentLength == rb.ContentLength && bytes.Equal(ba, bb) &&
		maps.EqualFunc(ra.Header, rb.Header, slices.Equal)
}

// writeBoth writes h's request with writeHeld and with Request.Write.
func writeBoth(t testing.TB, u string, h http.Header, body string) (written bool, held, std []byte) {
	t.Helper()
	var hbuf, sbuf bytes.Buffer
	bw := bufio.NewWriter(&hbuf)
	written, err := writeHeld(bw, heldRequest(t, u, h.Clone(), body))
	if err != nil {
		t.Fatal(err)
	}
	bw.Flush()
	if !written && hbuf.Len() > 0 {
		t.Fatalf("writeHeld declined %v but wrote %q", h, hbuf.Bytes())
	}
	if err := heldRequest(t, u, h.Clone(), body).Write(&sbuf); err != nil {
		t.Fatal(err)
	}
	return written, hbuf.Bytes(), sbuf.Bytes()
}

// TestWriteHeldAsRequestWrite: the requests writeHeld writes read back as
// what Request.Write writes of them; the others it leaves to
// Request.Write, writing nothing.
func TestWriteHeldAsRequestWrite(t *testing.T) {
	base := func() http.Header {
		return http.Header{
			"X-Api-Key":         {"sk-ant-test"},
			"Anthropic-Version": {"2023-06-01"},
			"Anthropic-Beta":    {"a", "b"},
			"Content-Type":      {"application/json"},
			"User-Agent":        {"Anthropic/Go 1.0"},
			"Accept":            {""},
		}
	}
	with := func(k string, vs ...string) http.Header {
		h := base()
		if vs == nil {
			delete(h, k)
		} else {
			h[k] = vs
		}
		return h
	}
	const body = `{"model":"claude-sonnet-4-6","max_tokens":10}`
	for _, c := range []struct {
		name    string
		url     string
		h       http.Header
		written bool
	}{
		{"a call", "https://api.anthropic.example/v1/messages", base(), true},
		{"a query", "https://api.anthropic.example/v1/messages?beta=true&x=%20y", base(), true},
		{"a port", "http://127.0.0.1:8080/v1/messages/count_tokens", base(), true},
		{"IPv6", "http://[::1]:8080/v1/messages", base(), true},
		{"no user agent's value", "https://a.example/v1/messages", with("User-Agent", ""), true},
		{"two user agents", "https://a.example/v1/messages", with("User-Agent", "one", "two"), true},
		{"TE", "https://a.example/v1/messages", with("Te", "trailers"), true},
		{"an escaped path", "https://a.example/v1/mess%2Fages", base(), true},
		{"no user agent", "https://a.example/v1/messages", with("User-Agent"), false},
		{"a value with a space at its end", "https://a.example/v1/messages", with("X-A", "v "), false},
		{"a value with a tab at its start", "https://a.example/v1/messages", with("X-A", "\tv"), false},
		{"a value with LF", "https://a.example/v1/messages", with("X-A", "a\nb"), false},
		{"a value with CR", "https://a.example/v1/messages", with("X-A", "a\rb"), false},
		{"a value with NUL", "https://a.example/v1/messages", with("X-A", "a\x00b"), false},
		{"a value with DEL", "https://a.example/v1/messages", with("X-A", "a\x7fb"), false},
		{"a name with a space", "https://a.example/v1/messages", with("X A", "v"), false},
		{"a zone", "http://[fe80::1%25en0]:8080/v1/messages", base(), false},
		{"a host not in ASCII", "https://bücher.example/v1/messages", base(), false},
		{"a space in the query", "https://a.example/v1/messages?a=b c", base(), false},
	} {
		written, held, std := writeBoth(t, c.url, c.h, body)
		if written != c.written {
			t.Errorf("%s: writeHeld wrote %v, want %v", c.name, written, c.written)
			continue
		}
		if written && !sameOnTheWire(t, held, std) {
			t.Errorf("%s: writeHeld wrote\n%q\nRequest.Write\n%q", c.name, held, std)
		}
	}

	// Not a held POST with a length, or with what Request.Write adds.
	for name, mod := range map[string]func(r *http.Request){
		"a GET":        func(r *http.Request) { r.Method = http.MethodGet },
		"a Host":       func(r *http.Request) { r.Host = "other.example" },
		"Close":        func(r *http.Request) { r.Close = true },
		"no length":    func(r *http.Request) { r.ContentLength = 0 },
		"chunked":      func(r *http.Request) { r.TransferEncoding = []string{"chunked"} },
		"trailers":     func(r *http.Request) { r.Trailer = http.Header{"X-T": nil} },
		"another body": func(r *http.Request) { r.Body = io.NopCloser(strings.NewReader(body)) },
	} {
		r := heldRequest(t, "https://a.example/v1/messages", base(), body)
		mod(r)
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		if written, _ := writeHeld(bw, r); written || bw.Buffered() > 0 {
			t.Errorf("%s: writeHeld wrote it", name)
		}
	}

	// A body released, or of another length than declared, is an error.
	r := heldRequest(t, "https://a.example/v1/messages", base(), body)
	r.Body.(*heldReader).h.b = nil
	if _, err := writeHeld(bufio.NewWriter(io.Discard), r); err != errBodyReleased {
		t.Errorf("a released body: %v", err)
	}
	r = heldRequest(t, "https://a.example/v1/messages", base(), body)
	r.ContentLength++
	if _, err := writeHeld(bufio.NewWriter(io.Discard), r); err != errBodyLength {
		t.Errorf("a body shorter than its length: %v", err)
	}
}

// FuzzWriteHeld holds writeHeld to Request.Write for any header and
// target it writes.
func FuzzWriteHeld(f *testing.F) {
	f.Add("X-A", "v", "/v1/messages", "b=1")
	f.Add("Anthropic-Beta", "a, b", "/v1/messages/count_tokens", "")
	f.Add("User-Agent", " x", "/v1/a b", "q=%zz")
	f.Fuzz(func(t *testing.T, k, v, path, query string) {
		if k == "" || !httpguts.ValidHeaderFieldName(k) {
			return
		}
		u := &url.URL{Scheme: "https", Host: "api.anthropic.example", Path: path, RawQuery: query}
		if _, err := url.Parse(u.String()); err != nil {
			return
		}
		h := http.Header{"User-Agent": {"ua"}, "X-Api-Key": {"k"}}
		h[http.CanonicalHeaderKey(k)] = []string{v}
		written, held, std := writeBoth(t, u.String(), h, `{"model":"m"}`)
		if !written {
			return
		}
		if !sameOnTheWire(t, held, std) {
			t.Fatalf("writeHeld wrote\n%q\nRequest.Write\n%q", held, std)
		}
	})
}
