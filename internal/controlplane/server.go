// Package controlplane is the TalkIDE BE: the browser API, the mint endpoint
// for WorkerTokens, the signed worker reporting endpoints, and the mount point
// of the gateway-proxy. It talks to workers only over signed HTTP.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/bodyroom"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// GatewayPrefix is where the gateway-proxy is mounted.
const GatewayPrefix = contract.GatewayPrefix

// Keys are what the control-plane signs with.
type Keys struct {
	// Tokens signs WorkerTokens.
	Tokens *trust.Keyring
	// CommandSecret is the master secret the per-tenant-env signing keys of
	// commands and reports are derived from; CommandKeyID names it.
	CommandSecret []byte
	CommandKeyID  string
	// Commands, when set, replaces CommandSecret and CommandKeyID: the
	// master secrets by key id, rotating without a restart. Commands are
	// signed with the ring's signing key; reports verify with the key
	// their signature names while it is not retired.
	Commands *trust.Keyring
}

// TenantEnv names a tenant-env.
type TenantEnv struct{ Tenant, Env string }

// Options configure the control-plane; the zero value of each field is its
// default.
type Options struct {
	// Gateway serves GatewayPrefix; nil answers 503 there.
	Gateway http.Handler
	// LocalUser, when set, makes the browser API act as that one user with
	// no credentials (talkide dev, loopback only).
	LocalUser string
	Logger    *slog.Logger // nil: don't log
	Now       func() time.Time
	// Heartbeat is the interval of SSE comments to browsers; default 15 s.
	Heartbeat time.Duration
	// WorkerTransport carries commands to workers; nil: a clone of
	// http.DefaultTransport.
	WorkerTransport http.RoundTripper
	// Budget serves the operator API's limits, status and usage reports
	// (AdminPrefix); nil: those answer 503.
	Budget *budget.Service
	// Operators authenticates the operator API; nil: it answers 503.
	Operators *OperatorTokens
	// Metrics, when set, is served at GET /metrics, without authentication
	// (it must reveal no secret and no user).
	Metrics http.Handler
	// UI, when set, serves every path outside /api/ that no endpoint
	// claims: the browser UI (internal/webui), held to the browser API's
	// loopback Host rule in local-user mode. nil: those paths are 404.
	UI http.Handler
	// BodyTimeout bounds how long a client may take to send a request's
	// body, from the request's start (httpapi.BodyDeadline); 0:
	// httpapi.DefaultBodyTimeout.
	BodyTimeout time.Duration

	// Auth authenticates the browser API's callers when there is no local
	// user, and serves /auth/ (login, callback, logout); nil with no local
	// user: the browser API refuses every request.
	Auth *auth.Authenticator

	// MaxStreamsPerUser, MaxStreamsPerConversation and MaxStreams cap the
	// browser event streams open at once on this replica: a stream beyond
	// a user's or a conversation's cap is answered 429, one beyond the
	// total 503, each with Retry-After and the cap named. 0:
	// DefaultMaxStreamsPerUser, DefaultMaxStreamsPerConversation, and
	// DefaultMaxStreams of the process's descriptor limit.
	MaxStreamsPerUser, MaxStreamsPerConversation, MaxStreams int
	// StreamQueue is how many events a browser may fall behind its
	// conversation's hub before it is moved to a catch-up stream of its
	// own; it is also the length of each hub's ring of recent events. 0:
	// 256.
	StreamQueue int
	// StreamWriteTimeout is how long a browser may take to accept one
	// write of its stream before the stream is ended; 0: 30 s.
	StreamWriteTimeout time.Duration
	// StreamMetrics, when set, is told of every stream refused.
	StreamMetrics StreamMetrics
	// TracerProvider, when set, traces each message sent from its browser
	// request through the signed command to the worker, and each report a
	// worker sends about it (docs/observability.md); nil: no spans.
	TracerProvider trace.TracerProvider

	// StreamCounts, when set, is where the replicas sharing the store
	// publish their open streams per user and per conversation, so that
	// MaxStreamsPerUser and MaxStreamsPerConversation count the streams of
	// every replica (ShareStreamCounts must run); MaxStreams stays this
	// replica's. nil: every cap counts this replica's streams only.
	StreamCounts store.StreamCounts
	// StreamShareInterval is how often the counts are published and read;
	// 0: DefaultStreamShareInterval.
	StreamShareInterval time.Duration
	// StreamShareTTL is how long a replica that stopped publishing is
	// still counted; 0: DefaultStreamShareTTL. It is raised to at least
	// three intervals.
	StreamShareTTL time.Duration

	// UploadMemory bounds the bytes of attached files this replica holds
	// in memory at once, each from its arrival until the worker has
	// stored it, and UploadMemoryPerUser one user's share of them. A file
	// beyond the user's share is refused unread, 429 too_many_uploads,
	// one beyond the whole 503, each with Retry-After. 0:
	// DefaultUploadMemory and DefaultUploadMemoryPerUser; a negative
	// UploadMemory: no bound.
	UploadMemory, UploadMemoryPerUser int64
	// UploadMetrics, when set, is told of every attached file refused
	// for want of that room.
	UploadMetrics UploadMetrics

	// TitleModel is the model that names new conversations, through
	// Gateway (titles.go); "": no title call, every title is the first
	// words of the first message. TitleTimeout bounds each call; 0:
	// DefaultTitleTimeout.
	TitleModel   string
	TitleTimeout time.Duration
}

// StreamMetrics observes the browser event streams (metrics.Metrics).
type StreamMetrics interface {
	// StreamRefused counts a stream refused by the cap named limit
	// ("user", "conversation" or "total").
	StreamRefused(limit string)
}

// UploadMetrics observes the attached files refused for want of room
// (metrics.Metrics).
type UploadMetrics interface {
	// UploadRefused counts a file refused by the bound named limit:
	// "user" or "total" (this replica's), or "worker" (the worker's).
	UploadRefused(limit string)
}

// DefaultUploadMemory is the default bound on the bytes of attached files
// a control-plane replica holds at once: six files of the largest size,
// for the moments when several users attach at once, beside a few
// hundred megabytes of the replica's other memory.
const DefaultUploadMemory = 64 << 20

// DefaultUploadMemoryPerUser is one user's default share of it: one
// message's files (contract.MaxAttachmentsTotal), though the browser
// sends a message's files one after another.
const DefaultUploadMemoryPerUser = contract.MaxAttachmentsTotal

// config is everything the server runs with: what New requires and the
// options with their defaults filled in.
type config struct {
	Options
	Store         store.Store
	Keyring       *trust.Keyring
	Commands      *trust.Keyring
	DefaultTenant string
	DefaultEnv    string
}

// Server is the control-plane.
type Server struct {
	cfg              config
	log              *slog.Logger
	reports          *trust.Verifier
	workerHTTP       *http.Client
	workerStreamHTTP *http.Client
	tracer           trace.Tracer // nil: tracing off
	// streams ends every browser stream when cancelled (CloseStreams).
	streams      context.Context
	closeStreams context.CancelFunc
	caps         *streamCaps
	uploads      *bodyroom.Room // UploadMemory
	replica      string         // ReplicaID
	hubs         *hubs
	activity     *activity
	titles       *titles
}

// StreamLimits returns the caps on browser streams in force.
func (s *Server) StreamLimits() StreamLimits { return s.caps.limits }

// StreamsOpen returns the browser event streams open now.
func (s *Server) StreamsOpen() int {
	open, _, _ := s.caps.counts()
	return open
}

// StreamUpstreams returns the event streams open to workers now: one per
// conversation that browsers follow, and one per browser catching up.
func (s *Server) StreamUpstreams() int { return int(s.hubs.upstreams.Load()) }

// CloseStreams ends every open browser event stream, so that a shutdown does
// not wait for streams that never end on their own; clients reconnect with
// Last-Event-ID. Register it with http.Server.RegisterOnShutdown.
func (s *Server) CloseStreams() { s.closeStreams() }

// New returns the control-plane server on store st, signing with keys;
// new conversations go to defaultEnv. Missing keys or tenant-env are an
// error, never a default: a control-plane that made them up would sign
// what no worker can check, or file conversations where nobody looks.
func New(st store.Store, keys Keys, defaultEnv TenantEnv, opts *Options) (*Server, error) {
	if st == nil || keys.Tokens == nil || (keys.Commands == nil && (len(keys.CommandSecret) < 32 || keys.CommandKeyID == "")) {
		return nil, errors.New("controlplane: a store, a token keyring, a command key id and a command secret of at least 32 bytes are required")
	}
	if keys.Commands == nil {
		ring, err := trust.NewKeyring(keys.CommandKeyID, map[string][]byte{keys.CommandKeyID: keys.CommandSecret})
		if err != nil {
			return nil, fmt.Errorf("controlplane: %w", err)
		}
		keys.Commands = ring
	}
	if defaultEnv.Tenant == "" || defaultEnv.Env == "" {
		return nil, errors.New("controlplane: the default tenant and env are required")
	}
	cfg := config{
		Store: st, Keyring: keys.Tokens, Commands: keys.Commands,
		DefaultTenant: defaultEnv.Tenant, DefaultEnv: defaultEnv.Env,
	}
	if opts != nil {
		cfg.Options = *opts
	}
	defaults.Logger(&cfg.Logger)
	defaults.Clock(&cfg.Now)
	defaults.IfNotPositive(&cfg.Heartbeat, 15*time.Second)
	defaults.IfNotPositive(&cfg.MaxStreamsPerUser, DefaultMaxStreamsPerUser)
	defaults.IfNotPositive(&cfg.MaxStreamsPerConversation, DefaultMaxStreamsPerConversation)
	if cfg.MaxStreams <= 0 {
		limit, err := fdlimit.Current()
		if err != nil {
			return nil, fmt.Errorf("controlplane: the default stream cap: %w", err)
		}
		cfg.MaxStreams = DefaultMaxStreams(limit)
	}
	defaults.IfZero(&cfg.UploadMemory, DefaultUploadMemory)
	defaults.IfNotPositive(&cfg.UploadMemoryPerUser, DefaultUploadMemoryPerUser)
	defaults.IfNotPositive(&cfg.StreamQueue, 256)
	defaults.IfNotPositive(&cfg.StreamWriteTimeout, 30*time.Second)
	defaults.IfNotPositive(&cfg.StreamShareInterval, DefaultStreamShareInterval)
	defaults.IfNotPositive(&cfg.StreamShareTTL, DefaultStreamShareTTL)
	cfg.StreamShareTTL = max(cfg.StreamShareTTL, 3*cfg.StreamShareInterval)
	if cfg.TitleTimeout <= 0 {
		cfg.TitleTimeout = DefaultTitleTimeout
	}
	if cfg.WorkerTransport == nil {
		cfg.WorkerTransport = http.DefaultTransport.(*http.Transport).Clone()
	}
	s := &Server{
		cfg:              cfg,
		log:              cfg.Logger,
		workerHTTP:       &http.Client{Transport: cfg.WorkerTransport, Timeout: 30 * time.Second},
		workerStreamHTTP: &http.Client{Transport: cfg.WorkerTransport},
		replica:          newReplicaID(),
		tracer:           observe.Tracer(cfg.TracerProvider, "controlplane"),
	}
	s.uploads = bodyroom.New(cfg.UploadMemory, cfg.UploadMemoryPerUser)
	s.streams, s.closeStreams = context.WithCancel(context.Background())
	var refused func(string)
	if cfg.StreamMetrics != nil {
		refused = cfg.StreamMetrics.StreamRefused
	}
	s.caps = newStreamCaps(StreamLimits{PerUser: cfg.MaxStreamsPerUser, PerConversation: cfg.MaxStreamsPerConversation, Total: cfg.MaxStreams}, refused, cfg.StreamCounts != nil)
	// A browser joins with up to a ring's worth of events queued; it may
	// then fall StreamQueue more behind.
	s.hubs = newHubs(s, cfg.StreamQueue, 2*cfg.StreamQueue)
	s.activity = newActivity(cfg.Now)
	s.titles = newTitles(s)
	s.reports = trust.NewVerifier(trust.ToControlPlane, s.reportKey, cfg.Now)
	return s, nil
}

// Handler returns the control-plane's HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	h := func(f httpapi.HandlerFunc) http.Handler { return httpapi.Handle(s.log, f) }

	mux.Handle("GET /api/me", h(s.browser(s.handleMe)))
	mux.Handle("POST /api/conversations", h(s.browser(s.handleCreateConversation)))
	mux.Handle("GET /api/conversations", h(s.browser(s.handleListConversations)))
	mux.Handle("GET /api/conversations/{id}", h(s.browser(s.handleGetConversation)))
	mux.Handle("PATCH /api/conversations/{id}", h(s.browser(s.handleUpdateConversation)))
	mux.Handle("GET /api/conversations/{id}/turns/{turn}/usage", h(s.browser(s.handleTurnUsage)))
	mux.Handle("GET /api/me/budget", h(s.browser(s.handleMyBudget)))
	mux.Handle("GET /api/search", h(s.browser(s.handleSearch)))
	mux.Handle("POST /api/conversations/{id}/messages", h(s.browser(s.handleSend)))
	mux.Handle("POST /api/conversations/{id}/interrupt", h(s.browser(s.handleInterrupt)))
	mux.Handle("GET /api/conversations/{id}/stream", h(s.browser(s.handleStream)))
	mux.Handle("GET /api/conversations/{id}/issues", h(s.browser(s.handleListIssues)))
	mux.Handle("GET /api/conversations/{id}/usage", h(s.browser(s.handleConversationUsage)))
	mux.Handle("GET /api/conversations/{id}/reports", h(s.browser(s.handleConversationReports)))
	mux.Handle("GET /api/tenants/{tenant}/reports", h(s.browser(s.handleTenantReports)))
	mux.Handle("GET /api/tenants/{tenant}/usage", h(s.browser(s.handleTenantUsage)))
	mux.Handle("GET /api/tenants/{tenant}/budget", h(s.browser(s.handleTenantBudget)))
	mux.Handle("GET /api/tenants/{tenant}/usage/report", h(s.browser(s.handleTenantUsageReport)))
	if s.cfg.Auth != nil {
		mux.Handle("/auth/", s.cfg.Auth.Handler())
	}
	mux.Handle("GET /api/conversations/{id}/events", h(s.browser(s.handleHistory)))
	s.registerWorkspace(mux, h)
	mux.Handle(attachPattern, h(s.browser(s.handleAttach)))

	mux.Handle("POST "+MintPath, h(s.handleMint))
	mux.Handle("POST "+contract.ReportsPath, h(s.handleReports))
	mux.Handle("POST "+contract.IssuesPath, h(s.handleWorkerCreateIssue))
	mux.Handle("GET "+contract.IssuesPath, h(s.handleWorkerListIssues))
	mux.Handle("POST "+contract.IssueCommentsPath, h(s.handleWorkerCommentIssue))

	gw := s.gateway()
	mux.Handle(GatewayPrefix+"/", gw)
	mux.Handle(GatewayPrefix, gw) // not a redirect to GatewayPrefix+"/": the gateway's own 404

	s.registerAdmin(mux, h)
	// With a local user the control-plane listens on loopback and trusts
	// whoever reaches it there; what it serves there without credentials
	// is held to the browser API's Host rule, so that a page that rebinds
	// a name of its own to 127.0.0.1 cannot read it.
	loopback := func(next http.Handler) http.Handler {
		if s.cfg.LocalUser == "" {
			return next
		}
		return httpapi.LoopbackOnly(s.log, next)
	}
	if s.cfg.Metrics != nil {
		mux.Handle("GET /metrics", loopback(s.cfg.Metrics))
		mux.Handle("/metrics", httpapi.MethodNotAllowed(s.log, http.MethodGet))
	}

	for path, allow := range map[string][]string{
		"/api/me":                             {http.MethodGet},
		"/api/conversations":                  {http.MethodGet, http.MethodPost},
		"/api/conversations/{id}":             {http.MethodGet, http.MethodPatch},
		"/api/me/budget":                      {http.MethodGet},
		"/api/search":                         {http.MethodGet},
		"/api/conversations/{id}/messages":    {http.MethodPost},
		"/api/conversations/{id}/attachments": {http.MethodPost},
		"/api/conversations/{id}/interrupt":   {http.MethodPost},
		"/api/conversations/{id}/stream":      {http.MethodGet},
		"/api/conversations/{id}/issues":      {http.MethodGet},
		"/api/conversations/{id}/usage":       {http.MethodGet},
		"/api/conversations/{id}/events":      {http.MethodGet},
		"/api/conversations/{id}/reports":     {http.MethodGet},
		"/api/tenants/{tenant}/reports":       {http.MethodGet},
		"/api/tenants/{tenant}/usage":         {http.MethodGet},
		"/api/tenants/{tenant}/budget":        {http.MethodGet},
		"/api/tenants/{tenant}/usage/report":  {http.MethodGet},
		MintPath:                              {http.MethodPost},
		contract.ReportsPath:                  {http.MethodPost},
		contract.IssuesPath:                   {http.MethodGet, http.MethodPost},
		contract.IssueCommentsPath:            {http.MethodPost},
		"/healthz":                            {http.MethodGet},
	} {
		mux.Handle(path, httpapi.MethodNotAllowed(s.log, allow...))
	}
	// Beside the map, whose alignment its long path would change.
	mux.Handle("/api/conversations/{id}/turns/{turn}/usage", httpapi.MethodNotAllowed(s.log, http.MethodGet))
	mux.Handle("GET /healthz", loopback(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})))
	notFound := h(func(http.ResponseWriter, *http.Request) error {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such endpoint")
	})
	if s.cfg.UI == nil {
		mux.Handle("/", notFound)
	} else {
		ui := loopback(s.cfg.UI)
		mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// An unknown API path stays a JSON 404: a client must never
			// get the app's HTML where it expects the contract's shape.
			if p := r.URL.Path; p == "/api" || strings.HasPrefix(p, "/api/") {
				notFound.ServeHTTP(w, r)
				return
			}
			ui.ServeHTTP(w, r)
		}))
	}
	return httpapi.BodyDeadline(s.cfg.BodyTimeout, s.crossOrigin(
		s.canonicalPaths(mux, gw, h(func(http.ResponseWriter, *http.Request) error { return httpapi.NonCanonicalPath() }))))
}

// canonicalPaths answers a request whose path is not canonical before the
// mux can redirect it to its cleaned form (net/http.ServeMux answers
// "/api/conversations/../internal/gateway/…" with a 307 to a path outside
// the prefix the client addressed, and a client that follows it goes
// there). A path under the gateway's prefix, as sent or once cleaned, goes
// to the gateway, which answers in Anthropic's shape; any other is bad.
func (s *Server) canonicalPaths(mux *http.ServeMux, gw, bad http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		if r.Method == http.MethodConnect || httpapi.CanonicalPath(p) {
			mux.ServeHTTP(w, r)
			return
		}
		if underGateway(p) || underGateway(path.Clean("/"+p)) {
			gw.ServeHTTP(w, r)
			return
		}
		bad.ServeHTTP(w, r)
	})
}

func underGateway(p string) bool {
	return p == GatewayPrefix || strings.HasPrefix(p, GatewayPrefix+"/")
}
