package h1serve

import (
	"io"
	"net/http"
	"testing"
)

// TestInvalidHeaderNamesDropped: a header or trailer name that is not a
// token (one with CR LF in it) is never written, as net/http drops it: it
// would split the response.
func TestInvalidHeaderNamesDropped(t *testing.T) {
	_, addr := start(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-A\r\nX-Injected"] = []string{"1"}
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "x")
		w.Header().Set("X-Sum", "1")
		w.Header()[http.TrailerPrefix+"X-T\r\nX-Injected-Trailer"] = []string{"2"}
	})
	c := dial(t, addr)
	c.send("GET /hot/a HTTP/1.1\r\nHost: x\r\n\r\n")
	res, body := c.read("GET")
	if res.Header.Get("X-Injected") != "" || res.Trailer.Get("X-Injected-Trailer") != "" {
		t.Errorf("an injected line: header %v, trailer %v", res.Header, res.Trailer)
	}
	if body != "x" || res.Trailer.Get("X-Sum") != "1" {
		t.Errorf("body %q, trailer %v", body, res.Trailer)
	}
}
