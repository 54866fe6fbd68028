package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

func TestCanonicalPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/": true, "/api/conversations": true, "/api/conversations/": true, "/a/b%2E%2E/c": true, "/a/%2F/b": true,
		"": false, "api": false, "//api": false, "/api//x": false, "/api/./x": false, "/api/../x": false,
		"/api/x/..": false, "/api/x/.": false, "/api/x//": false, "/..": false,
	} {
		if got := httpapi.CanonicalPath(p); got != want {
			t.Errorf("CanonicalPath(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestLoopbackOnly(t *testing.T) {
	h := httpapi.LoopbackOnly(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("secret")) }))
	for host, want := range map[string]int{
		"127.0.0.1:7878": 200, "localhost": 200, "LOCALHOST:1": 200, "[::1]:7878": 200, "127.9.9.9": 200,
		"evil.example": 403, "evil.example:7878": 403, "127.0.0.1.nip.io": 403, "0.0.0.0": 403, "10.0.0.1:7878": 403, "": 403,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Host = host
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %q: status %d, want %d", host, rec.Code, want)
		}
		if want == 403 {
			if strings.Contains(rec.Body.String(), "secret") {
				t.Errorf("Host %q: the handler ran", host)
			}
			if e := decodeError(t, rec); e.Error.Code != contract.CodeForbidden {
				t.Errorf("Host %q: %+v", host, e)
			}
		}
	}
}
