package controlplane_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/controlplane"
)

// TestGatewayHandlerAsRouted: every request a server sends to
// GatewayHandler (its target starts with the gateway's prefix) gets the
// answer the whole API's handler gives it, on each listener that serves
// the gateway: no check or route on the way changes what the gateway's
// requests get, however their path is spelled and whatever their origin.
func TestGatewayHandlerAsRouted(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %q %q", r.Method, r.URL.EscapedPath(), b, r.Header.Get("Origin"))
	})
	for name, gw := range map[string]http.Handler{"gateway": echo, "no gateway": nil} {
		h := newHarness(t, harnessOptions{gateway: gw})
		routed := map[string]http.Handler{
			"all groups":          h.cp.Handler(),
			"internal":            h.cp.HandlerFor(controlplane.Internal),
			"public and internal": h.cp.HandlerFor(controlplane.Public | controlplane.Internal),
		}
		p := controlplane.GatewayPrefix + "/"
		for _, target := range []string{
			p + "v1/messages", p + "v1/messages/count_tokens", p + "v1/models", p,
			p + "v1/../v1/messages", p + "./v1/messages", p + "/v1/messages", p + "v1//messages",
			p + "%2e%2e/%2e%2e/%2e%2e/api/me", p + "../../../../api/me", p + "../../../../metrics",
			p + "v1/messages?beta=true", p + "v1/messages%3Fx",
		} {
			for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodPut, http.MethodHead, http.MethodConnect} {
				for _, origin := range []string{"", "https://elsewhere.example"} {
					serve := func(hd http.Handler) (int, string) {
						t.Helper()
						req := httptest.NewRequest(method, target, strings.NewReader(`{"model":"m"}`))
						if origin != "" {
							req.Header.Set("Origin", origin)
							req.Header.Set("Sec-Fetch-Site", "cross-site")
						}
						w := httptest.NewRecorder()
						hd.ServeHTTP(w, req)
						// The headers the server acts on, or a client does.
						var head strings.Builder
						for _, k := range []string{"Connection", "Allow", "Retry-After", "Content-Type", "Location"} {
							fmt.Fprintf(&head, "%s=%q ", k, w.Header().Values(k))
						}
						return w.Code, head.String() + w.Body.String()
					}
					code, body := serve(h.cp.GatewayHandler())
					for rn, hd := range routed {
						if c, b := serve(hd); c != code || b != body {
							t.Errorf("%s, %s listener, %s %s (origin %q): routed %d %q, GatewayHandler %d %q",
								name, rn, method, target, origin, c, b, code, body)
						}
					}
				}
			}
		}
	}
}

// twoWays is a gateway that can be served without its own bound on a
// body's time (as internal/gateway's is), and says which way it was.
type twoWays struct{}

func (twoWays) ServeHTTP(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "bounded") }

func (twoWays) Unbounded() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "unbounded") })
}

// TestGatewayHandlerUnbounded: GatewayHandler serves a gateway that
// offers it unbounded (its server bounds the body), the whole API's
// handler through its ServeHTTP (under the API's own bound).
func TestGatewayHandlerUnbounded(t *testing.T) {
	h := newHarness(t, harnessOptions{gateway: twoWays{}})
	for name, c := range map[string]struct {
		h    http.Handler
		want string
	}{
		"GatewayHandler": {h.cp.GatewayHandler(), "unbounded"},
		"Handler":        {h.cp.Handler(), "bounded"},
	} {
		w := httptest.NewRecorder()
		c.h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, controlplane.GatewayPrefix+"/v1/messages", strings.NewReader("{}")))
		if w.Body.String() != c.want {
			t.Errorf("%s served the gateway %s, want %s", name, w.Body.String(), c.want)
		}
	}
}
