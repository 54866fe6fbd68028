package webui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, "http://127.0.0.1:7878/", nil)
	req.URL.Path = path
	req.URL.RawPath = ""
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

var testFiles = fstest.MapFS{
	"index.html":           {Data: []byte(`<!doctype html><script type="module" src="/assets/main-ABC.js"></script>`)},
	"assets/main-ABC.js":   {Data: []byte(`console.log(1)`)},
	"assets/style-DEF.css": {Data: []byte(`body{}`)},
}

// TestHandlerHeaders: every answer carries the CSP and the other security
// headers, index.html is never cached, hashed assets for a year.
func TestHandlerHeaders(t *testing.T) {
	h := New(testFiles)
	for _, tc := range []struct {
		path, cache, ctype, want string
	}{
		{"/", "no-cache", "text/html; charset=utf-8", "<!doctype html>"},
		{"/c/c_123", "no-cache", "text/html; charset=utf-8", "<!doctype html>"},
		{"/some/deep/route", "no-cache", "text/html; charset=utf-8", "<!doctype html>"},
		{"/assets/main-ABC.js", "public, max-age=31536000, immutable", "text/javascript; charset=utf-8", "console.log(1)"},
		{"/assets/style-DEF.css", "public, max-age=31536000, immutable", "text/css; charset=utf-8", "body{}"},
	} {
		r := get(t, h, http.MethodGet, tc.path)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", tc.path, r.StatusCode)
		}
		if got := r.Header.Get("Cache-Control"); got != tc.cache {
			t.Errorf("%s: Cache-Control %q, want %q", tc.path, got, tc.cache)
		}
		if got := r.Header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		for k, v := range map[string]string{
			"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
			"Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
		} {
			if got := r.Header.Get(k); got != v {
				t.Errorf("%s: %s %q, want %q", tc.path, k, got, v)
			}
		}
		if b := body(t, r); !strings.Contains(b, tc.want) {
			t.Errorf("%s: body %q", tc.path, b)
		}
	}
	for _, d := range []string{"default-src 'self'", "script-src 'self'", "img-src 'self' data:", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(CSP, d) {
			t.Errorf("the CSP lacks %q", d)
		}
	}
	if strings.Contains(CSP, "unsafe") {
		t.Errorf("the CSP allows something unsafe: %s", CSP)
	}
}

// TestHandlerRefuses: a missing asset is a 404, never the app's HTML served
// as a script; paths that try to leave dist name nothing; only GET and HEAD.
func TestHandlerRefuses(t *testing.T) {
	h := New(testFiles)
	for _, p := range []string{
		"/assets/missing-XYZ.js", "/assets/../index.html", "/assets/./main-ABC.js", "/assets//main-ABC.js",
		"/assets/", "/assets/..", "/assets/%2e%2e/index.html", "/assets/..\\index.html", "/assets/../../etc/passwd",
	} {
		r := get(t, h, http.MethodGet, p)
		if r.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", p, r.StatusCode)
		}
		if b := body(t, r); strings.Contains(b, "<!doctype") || strings.Contains(b, "console.log") {
			t.Errorf("%s: served %q", p, b)
		}
		if r.Header.Get("Content-Security-Policy") != CSP {
			t.Errorf("%s: no CSP on the 404", p)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		r := get(t, h, m, "/")
		if r.StatusCode != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /: status %d Allow %q", m, r.StatusCode, r.Header.Get("Allow"))
		}
	}
	r := get(t, h, http.MethodHead, "/")
	if r.StatusCode != http.StatusOK || body(t, r) != "" {
		t.Errorf("HEAD /: status %d, body %q", r.StatusCode, body(t, r))
	}
	if r := get(t, New(fstest.MapFS{}), http.MethodGet, "/"); r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("an unbuilt UI answers %d, want 503", r.StatusCode)
	}
}

// TestEmbeddedBuild: the committed build is embedded, its index.html names
// hashed assets that exist, and no inline script could need 'unsafe-inline'.
func TestEmbeddedBuild(t *testing.T) {
	h := Handler()
	r := get(t, h, http.MethodGet, "/")
	html := body(t, r)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d %s", r.StatusCode, html)
	}
	refs := regexp.MustCompile(`(?:src|href)="(/assets/[A-Za-z0-9_.-]+-[A-Z0-9]{8}\.(?:js|css))"`).FindAllStringSubmatch(html, -1)
	if len(refs) != 2 {
		t.Fatalf("index.html names %d hashed assets, want a script and a stylesheet:\n%s", len(refs), html)
	}
	for _, m := range refs {
		if r := get(t, h, http.MethodGet, m[1]); r.StatusCode != http.StatusOK || r.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
			t.Errorf("%s: status %d, Cache-Control %q", m[1], r.StatusCode, r.Header.Get("Cache-Control"))
		}
	}
	if regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`).MatchString(html) || strings.Contains(html, "style=") {
		t.Errorf("index.html has an inline script or style, which the CSP refuses:\n%s", html)
	}
}
