package controlplane

import (
	"net/http"
	"path"
	"strings"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

// The control-plane's endpoints fall in three groups, which a deployment
// serves on three listeners (docs/accounts.md): the public one (browser
// API, login, UI), the internal one (what workers call: the gateway, the
// mint, reports and issues; and the operator API) and the metrics one.
// Handler serves all three together (talkide dev, one loopback listener);
// PublicHandler, InternalHandler and MetricsHandler each serve one group
// and answer 404 for the others' paths, as if they did not exist.

// internalPath reports whether p (an escaped request path) is an internal
// endpoint's, as sent or once cleaned: a path that cleans into the internal
// prefix is internal too, whatever the mux would make of it.
func internalPath(p string) bool {
	for _, q := range []string{p, path.Clean("/" + p)} {
		if q == MintPath || q == AdminPrefix || strings.HasPrefix(q, AdminPrefix+"/") ||
			q == "/api/internal" || strings.HasPrefix(q, "/api/internal/") {
			return true
		}
	}
	return false
}

func metricsPath(p string) bool { return p == "/metrics" || path.Clean("/"+p) == "/metrics" }

// gateway is the handler of the gateway's route in the whole API.
func (s *Server) gateway() http.Handler {
	if s.cfg.Gateway != nil {
		return s.cfg.Gateway
	}
	return httpapi.Handle(s.log, func(http.ResponseWriter, *http.Request) error {
		return httpapi.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "the gateway is not configured")
	})
}

// only serves h to the requests keep accepts and answers the others 404.
func (s *Server) only(h http.Handler, keep func(p string) bool) http.Handler {
	notFound := httpapi.Handle(s.log, func(http.ResponseWriter, *http.Request) error {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such endpoint")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !keep(r.URL.EscapedPath()) {
			notFound.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Group is a set of the endpoint groups.
type Group int

const (
	// Public: the browser API, /auth/, the UI and everything else that is
	// neither Internal nor Metrics.
	Public Group = 1 << iota
	// Internal: the gateway, the mint, worker reports and issues, the
	// operator API.
	Internal
	// Metrics: /metrics.
	Metrics
)

// HandlerFor serves the groups in g, and /healthz; any other path is 404.
func (s *Server) HandlerFor(g Group) http.Handler {
	if g == Public|Internal|Metrics {
		return s.Handler()
	}
	return s.only(s.Handler(), func(p string) bool {
		switch {
		case p == "/healthz":
			return true
		case internalPath(p):
			return g&Internal != 0
		case metricsPath(p):
			return g&Metrics != 0
		}
		return g&Public != 0
	})
}

// PublicHandler is HandlerFor(Public).
func (s *Server) PublicHandler() http.Handler { return s.HandlerFor(Public) }

// InternalHandler is HandlerFor(Internal).
func (s *Server) InternalHandler() http.Handler { return s.HandlerFor(Internal) }

// MetricsHandler is HandlerFor(Metrics).
func (s *Server) MetricsHandler() http.Handler { return s.HandlerFor(Metrics) }

// crossOrigin refuses a state-changing request a browser sends from
// another origin (by Sec-Fetch-Site, else Origin against Host) on every
// endpoint of the public group: the browser API, /auth/, the UI, with no
// bypass pattern. Clients that are not browsers (the CLI, scripts) send
// neither header and pass. The internal endpoints are left to their own
// credentials (signatures, WorkerTokens, operator tokens; never a cookie):
// their callers are programs whose HTTP stacks may send an Origin of
// their own, and a split deployment does not serve them publicly at all.
func (s *Server) crossOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(httpapi.Handle(s.log, func(http.ResponseWriter, *http.Request) error {
		return httpapi.Errorf(http.StatusForbidden, contract.CodeForbidden, "cross-origin requests are refused")
	}))
	public := cop.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if internalPath(r.URL.EscapedPath()) {
			next.ServeHTTP(w, r)
			return
		}
		public.ServeHTTP(w, r)
	})
}
