package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/fakeclock"
	"github.com/talkide/platform/internal/gateway"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/store/storetest"
	"github.com/talkide/platform/internal/trust"
)

// The tenant-envs, users and secrets every test starts with.
const (
	tenant     = "acme"
	env        = "prod"
	otherEnv   = "staging" // exists; its worker is never called
	user       = "alice"
	otherUser  = "bob"
	commandKID = "c1"
	simKey     = "sk-sim-test"
	tokenKID   = "k1"
)

var (
	commandSecret = bytes.Repeat([]byte("s"), 32)
	tokenKey      = bytes.Repeat([]byte("k"), 32)
	// start is a whole second, so that second-resolution claims compare
	// exactly.
	start = time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC)
)

// fakeWorker is a worker that checks the control-plane's signatures like
// the real one (direction ToWorker, the env's derived key) and answers
// canned contract JSON.
type fakeWorker struct {
	t        testing.TB
	srv      *httptest.Server
	verifier *trust.Verifier
	opts     fakeOptions

	mu sync.Mutex
	// guarded by mu
	sessions map[string]bool
	messages map[string]bool // client message ids seen
	creates  []contract.CreateSessionRequest
	sends    []contract.SendMessageRequest
	afters   []string // the after= of every stream request
	requests int      // every request, signed or not
	badSigs  []string
}

type fakeOptions struct {
	// command, when set, answers every signed command (not streams) it
	// returns true for, instead of the default behaviour.
	command func(w http.ResponseWriter, r *http.Request) bool
	// stream serves the n-th (from 1) signed stream request; nil answers
	// 404.
	stream func(w http.ResponseWriter, r *http.Request, n int)
}

func startFakeWorker(t testing.TB, clk *fakeclock.Clock, opts fakeOptions) *fakeWorker {
	t.Helper()
	f := &fakeWorker{t: t, opts: opts, sessions: map[string]bool{}, messages: map[string]bool{}}
	f.verifier = trust.NewVerifier(trust.ToWorker, func(te, e, kid string) ([]byte, bool) {
		if te != tenant || e != env || kid != commandKID {
			return nil, false
		}
		return trust.DeriveEnvKey(commandSecret, te, e), true
	}, clk.Now)
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+contract.SessionsPath, f.create)
	mux.HandleFunc("GET "+contract.SessionPath, f.get)
	mux.HandleFunc("POST "+contract.MessagesPath, f.send)
	mux.HandleFunc("POST "+contract.InterruptPath, f.interrupt)
	mux.HandleFunc("GET "+contract.StreamPath, f.stream)
	f.srv = httptest.NewServer(f.checkSignature(mux))
	t.Cleanup(func() {
		f.srv.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.badSigs) > 0 {
			t.Errorf("the fake worker refused the control-plane's signatures: %q", f.badSigs)
		}
	})
	return f
}

func (f *fakeWorker) checkSignature(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests++
		f.mu.Unlock()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			httpapi.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, "unreadable body")
			return
		}
		if _, err := f.verifier.Verify(r, body); err != nil {
			f.mu.Lock()
			f.badSigs = append(f.badSigs, r.Method+" "+r.URL.RequestURI()+": "+err.Error())
			f.mu.Unlock()
			httpapi.WriteError(w, http.StatusUnauthorized, contract.CodeUnauthorized, "bad signature")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if f.opts.command != nil && !strings.HasSuffix(r.URL.Path, "/stream") && f.opts.command(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (f *fakeWorker) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := decodeRequest(w, r, v); err != nil {
		f.t.Errorf("fake worker: %s %s: %v", r.Method, r.URL.Path, err)
		return false
	}
	return true
}

// decodeRequest decodes r's JSON body into v, as a worker does: what does
// not decode is answered 400.
func decodeRequest(w http.ResponseWriter, r *http.Request, v any) error {
	body, _ := io.ReadAll(r.Body)
	err := httpapi.DecodeJSON(body, v)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, err.Error())
	}
	return err
}

// record keeps req in log and marks its key in keys, under f's lock; it
// reports whether the key was marked before (a retry).
func record[R any](f *fakeWorker, log *[]R, req R, keys map[string]bool, key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	*log = append(*log, req)
	seen := keys[key]
	keys[key] = true
	return seen
}

func (f *fakeWorker) state(id string, created bool) contract.SessionState {
	return contract.SessionState{ConversationID: id, Created: created, Status: contract.StatusIdle, LastSeq: 2, CreatedAt: start, Harness: "fake"}
}

func (f *fakeWorker) create(w http.ResponseWriter, r *http.Request) {
	var req contract.CreateSessionRequest
	if !f.decode(w, r, &req) {
		return
	}
	created := !record(f, &f.creates, req, f.sessions, req.ConversationID)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	httpapi.WriteJSON(w, status, f.state(req.ConversationID, created))
}

func (f *fakeWorker) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f.mu.Lock()
	ok := f.sessions[id]
	f.mu.Unlock()
	if !ok {
		httpapi.WriteError(w, http.StatusNotFound, contract.CodeNotFound, "no session "+id)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, f.state(id, false))
}

func (f *fakeWorker) send(w http.ResponseWriter, r *http.Request) {
	var req contract.SendMessageRequest
	if !f.decode(w, r, &req) {
		return
	}
	dup := record(f, &f.sends, req, f.messages, req.ClientMessageID)
	status := http.StatusAccepted
	if dup {
		status = http.StatusOK
	}
	httpapi.WriteJSON(w, status, contract.SendMessageResponse{
		ConversationID: r.PathValue("id"), ClientMessageID: req.ClientMessageID, TurnID: "t_1", Duplicate: dup, Seq: 3,
	})
}

func (f *fakeWorker) interrupt(w http.ResponseWriter, r *http.Request) {
	httpapi.WriteJSON(w, http.StatusOK, contract.InterruptResponse{ConversationID: r.PathValue("id"), TurnID: "t_1", Interrupted: true})
}

func (f *fakeWorker) stream(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.afters = append(f.afters, r.URL.Query().Get("after"))
	n := len(f.afters)
	f.mu.Unlock()
	if f.opts.stream == nil {
		httpapi.WriteError(w, http.StatusNotFound, contract.CodeNotFound, "no session "+r.PathValue("id"))
		return
	}
	f.opts.stream(w, r, n)
}

func (f *fakeWorker) Creates() []contract.CreateSessionRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]contract.CreateSessionRequest(nil), f.creates...)
}

func (f *fakeWorker) Sends() []contract.SendMessageRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]contract.SendMessageRequest(nil), f.sends...)
}

func (f *fakeWorker) Afters() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.afters...)
}

func (f *fakeWorker) Requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// harness is a control-plane on a loopback listener with a real sqlite store
// in a temp dir, a real keyring and a fake worker for acme/prod.
type harness struct {
	t       testing.TB
	url     string
	client  *http.Client
	store   *sqlite.Store
	keyring *trust.Keyring
	clock   *fakeclock.Clock
	worker  *fakeWorker
	cp      *controlplane.Server
	gw      *gateway.Gateway // with harnessOptions.titles
	budget  *budget.Service  // with harnessOptions.budget
}

type harnessOptions struct {
	noLocalUser bool
	heartbeat   time.Duration
	gateway     http.Handler
	metrics     http.Handler
	bodyTimeout time.Duration
	worker      fakeOptions
	streams     controlplane.Options // the stream caps and queue, and the upload bounds, only
	// listener, when set, is what the control-plane serves on (with an
	// http.Server as talkide's), instead of an httptest server's.
	listener net.Listener
	// budget gives the control-plane a budget service on its store.
	budget bool
	// shareStreams, when set, gives the control-plane the stream counts
	// it returns for the harness's store (with streams'
	// StreamShareInterval and StreamShareTTL), and runs their sharing
	// for the test.
	shareStreams func(store.Store) store.StreamCounts
	// titles, when set, is the Anthropic API (the simulator) of a real
	// gateway the control-plane names conversations through, with
	// titleModel (and the harness's budget, if any); the harness runs
	// RunTitles for the test.
	titles     http.Handler
	titleModel string
	// tracer, when set, is the control-plane's TracerProvider.
	tracer trace.TracerProvider
}

// demoHarness is a harness with the default options and one conversation,
// demo, of user in env.
func demoHarness(t testing.TB) *harness {
	t.Helper()
	h := newHarness(t, harnessOptions{})
	h.insertConversation("demo", user, env)
	return h
}

func newHarness(t testing.TB, opts harnessOptions) *harness {
	t.Helper()
	clk := fakeclock.New(start)
	st := storetest.Open(t, sqlite.Open, filepath.Join(t.TempDir(), "cp.db"))
	kr, err := trust.NewKeyring(tokenKID, map[string][]byte{tokenKID: tokenKey})
	if err != nil {
		t.Fatal(err)
	}
	fw := startFakeWorker(t, clk, opts.worker)
	for _, e := range []store.Env{
		{Tenant: tenant, Name: env, WorkerURL: fw.srv.URL, CreatedAt: start},
		{Tenant: tenant, Name: otherEnv, WorkerURL: "http://127.0.0.1:1", CreatedAt: start},
	} {
		if err := st.PutEnv(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	localUser := user
	if opts.noLocalUser {
		localUser = ""
	}
	var bud *budget.Service
	if opts.budget {
		bud = budget.New(st, budget.DefaultPrices(), &budget.Options{Now: clk.Now})
		t.Cleanup(func() { bud.Close(context.Background()) })
	}
	var counts store.StreamCounts
	if opts.shareStreams != nil {
		counts = opts.shareStreams(st)
	}
	gwHandler := opts.gateway
	var gw *gateway.Gateway
	if opts.titles != nil {
		up := httptest.NewServer(opts.titles)
		t.Cleanup(up.Close)
		u, err := url.Parse(up.URL)
		if err != nil {
			t.Fatal(err)
		}
		gopts := &gateway.Options{Now: clk.Now}
		if bud != nil {
			gopts.Budget = bud
		}
		gw = gateway.New(u, simKey, kr, st, gopts)
		t.Cleanup(func() { gw.Close(context.Background()) })
		gwHandler = gw
	}
	cp, err := controlplane.New(st, controlplane.Keys{Tokens: kr, CommandSecret: commandSecret, CommandKeyID: commandKID},
		controlplane.TenantEnv{Tenant: tenant, Env: env}, &controlplane.Options{
			Gateway:     gwHandler,
			TitleModel:  opts.titleModel,
			Metrics:     opts.metrics,
			BodyTimeout: opts.bodyTimeout,
			LocalUser:   localUser,
			Now:         clk.Now,
			Heartbeat:   opts.heartbeat,
			Budget:      bud,

			MaxStreamsPerUser:         opts.streams.MaxStreamsPerUser,
			MaxStreamsPerConversation: opts.streams.MaxStreamsPerConversation,
			MaxStreams:                opts.streams.MaxStreams,
			StreamQueue:               opts.streams.StreamQueue,
			StreamMetrics:             opts.streams.StreamMetrics,
			StreamCounts:              counts,
			StreamShareInterval:       opts.streams.StreamShareInterval,
			StreamShareTTL:            opts.streams.StreamShareTTL,
			UploadMemory:              opts.streams.UploadMemory,
			UploadMemoryPerUser:       opts.streams.UploadMemoryPerUser,
			UploadMetrics:             opts.streams.UploadMetrics,

			TracerProvider: opts.tracer,
		})
	if err != nil {
		t.Fatal(err)
	}
	if opts.titles != nil {
		runForTest(t, func(ctx context.Context) { cp.RunTitles(ctx) })
	}
	if counts != nil {
		runForTest(t, cp.ShareStreamCounts)
	}
	if opts.listener != nil {
		srv := &http.Server{Handler: cp.Handler(), ReadHeaderTimeout: 10 * time.Second}
		srv.RegisterOnShutdown(cp.CloseStreams)
		go srv.Serve(opts.listener)
		t.Cleanup(func() { srv.Close() })
		return &harness{t: t, url: "http://" + opts.listener.Addr().String(), client: &http.Client{}, store: st, keyring: kr, clock: clk, worker: fw, cp: cp, gw: gw, budget: bud}
	}
	srv := httptest.NewServer(cp.Handler())
	t.Cleanup(srv.Close)
	return &harness{t: t, url: srv.URL, client: srv.Client(), store: st, keyring: kr, clock: clk, worker: fw, cp: cp, gw: gw, budget: bud}
}

// runForTest runs fn until the test ends, and waits for it to return.
func runForTest(t testing.TB, fn func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// do sends a request to the control-plane and returns the answer with its
// body read.
func (h *harness) do(method, path, body string, header http.Header) (*http.Response, []byte) {
	h.t.Helper()
	req := newRequest(h.t, method, h.url+path, body)
	for k, vs := range header {
		req.Header[k] = vs
	}
	return roundtrip.With(h.t, h.client, req)
}

// newRequest is a request whose body, when there is one, is JSON unless
// the caller sets another Content-Type.
func newRequest(t testing.TB, method, url, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// insertConversation stores a conversation directly, bypassing the API.
func (h *harness) insertConversation(id, owner, envName string) {
	h.t.Helper()
	if err := h.store.PutUser(h.t.Context(), store.User{ID: owner, Name: owner, CreatedAt: start}); err != nil {
		h.t.Fatal(err)
	}
	if _, _, err := h.store.CreateConversation(h.t.Context(), store.Conversation{
		ID: id, Tenant: tenant, Env: envName, UserID: owner, Title: id, CreatedAt: h.clock.Now(),
	}); err != nil {
		h.t.Fatal(err)
	}
}

// setWorkerURL points acme/prod at another worker address.
func (h *harness) setWorkerURL(u string) {
	h.t.Helper()
	if err := h.store.PutEnv(h.t.Context(), store.Env{Tenant: tenant, Name: env, WorkerURL: u, CreatedAt: start}); err != nil {
		h.t.Fatal(err)
	}
}

// closedURL returns the address of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	return u
}

// wantNoWorkerRequests checks that nothing reached the worker; what, when
// set, names what was refused.
func (h *harness) wantNoWorkerRequests(t *testing.T, what string) {
	t.Helper()
	switch n := h.worker.Requests(); {
	case n == 0:
	case what == "":
		t.Errorf("the worker got %d requests", n)
	default:
		t.Errorf("the worker got %d requests for %s", n, what)
	}
}

// wantFieldError checks a 400 bad_request whose message starts with the
// name of the offending field.
func wantFieldError(t *testing.T, resp *http.Response, body []byte, field string) {
	t.Helper()
	if msg := wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest); !strings.HasPrefix(msg, field+" ") {
		t.Errorf("message %q does not start with %s", msg, field)
	}
}

// wantError checks that an answer is the contract's error shape with status
// and code, and returns its message.
func wantError(t *testing.T, resp *http.Response, body []byte, status int, code string) string {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status = %d, want %d (body %s)", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var e contract.Error
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("body %q is not a contract.Error: %v", body, err)
	}
	if e.Error.Code != code {
		t.Errorf("code = %q (%q), want %q", e.Error.Code, e.Error.Message, code)
	}
	if e.Error.Message == "" {
		t.Errorf("error without a message: %s", body)
	}
	return e.Error.Message
}

// refusal is an error answer a test expects: its status and code.
type refusal struct {
	status int
	code   string
}

var (
	badRequest = refusal{http.StatusBadRequest, contract.CodeBadRequest}
	invalidID  = refusal{http.StatusBadRequest, contract.CodeInvalidID}
	notFound   = refusal{http.StatusNotFound, contract.CodeNotFound}
)

// wantRefusedGETs GETs each path and checks that it is answered with its
// refusal, stopping at the first that is not.
func (h *harness) wantRefusedGETs(t *testing.T, paths map[string]refusal) {
	t.Helper()
	for path, w := range paths {
		resp, body := h.do(http.MethodGet, path, "", nil)
		wantError(t, resp, body, w.status, w.code)
		if t.Failed() {
			t.Fatalf("GET %s", path)
		}
	}
}

// decodeJSON decodes body strictly into v.
func decodeJSON(t testing.TB, body []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
}

func TestNewRequiresConfig(t *testing.T) {
	st := storetest.Open(t, sqlite.Open, ":memory:")
	kr, err := trust.NewKeyring(tokenKID, map[string][]byte{tokenKID: tokenKey})
	if err != nil {
		t.Fatal(err)
	}
	type args struct {
		st   store.Store
		keys controlplane.Keys
		home controlplane.TenantEnv
	}
	valid := func() args {
		return args{st, controlplane.Keys{Tokens: kr, CommandSecret: commandSecret, CommandKeyID: commandKID},
			controlplane.TenantEnv{Tenant: tenant, Env: env}}
	}
	tests := map[string]func(*args){
		"no store":         func(a *args) { a.st = nil },
		"no keyring":       func(a *args) { a.keys.Tokens = nil },
		"short secret":     func(a *args) { a.keys.CommandSecret = commandSecret[:31] },
		"no key id":        func(a *args) { a.keys.CommandKeyID = "" },
		"no tenant":        func(a *args) { a.home.Tenant = "" },
		"no default env":   func(a *args) { a.home.Env = "" },
		"everything unset": func(a *args) { *a = args{} },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			a := valid()
			mutate(&a)
			if s, err := controlplane.New(a.st, a.keys, a.home, nil); err == nil || s != nil {
				t.Errorf("New = %v, %v; want an error", s, err)
			}
		})
	}
	a := valid()
	if _, err := controlplane.New(a.st, a.keys, a.home, nil); err != nil {
		t.Errorf("New(valid) = %v", err)
	}
}

func TestRouting(t *testing.T) {
	gatewayHit := make(chan string, 1)
	gateway := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gatewayHit <- r.URL.Path
		w.WriteHeader(http.StatusTeapot)
	})
	tests := map[string]struct {
		gateway    http.Handler
		method     string
		path       string
		wantStatus int
		wantCode   string // "" means not an error
	}{
		"unknown path":                   {method: http.MethodGet, path: "/nope", wantStatus: http.StatusNotFound, wantCode: contract.CodeNotFound},
		"unknown api path":               {method: http.MethodPost, path: "/api/v2/conversations", wantStatus: http.StatusNotFound, wantCode: contract.CodeNotFound},
		"root":                           {method: http.MethodGet, path: "/", wantStatus: http.StatusNotFound, wantCode: contract.CodeNotFound},
		"healthz":                        {method: http.MethodGet, path: "/healthz", wantStatus: http.StatusOK},
		"wrong method, send":             {method: http.MethodGet, path: "/api/conversations/demo/messages", wantStatus: http.StatusMethodNotAllowed, wantCode: contract.CodeMethodNotAllowed},
		"wrong method, stream":           {method: http.MethodPost, path: "/api/conversations/demo/stream", wantStatus: http.StatusMethodNotAllowed, wantCode: contract.CodeMethodNotAllowed},
		"wrong method, list":             {method: http.MethodDelete, path: "/api/conversations", wantStatus: http.StatusMethodNotAllowed, wantCode: contract.CodeMethodNotAllowed},
		"wrong method, mint":             {method: http.MethodGet, path: controlplane.MintPath, wantStatus: http.StatusMethodNotAllowed, wantCode: contract.CodeMethodNotAllowed},
		"gateway not configured":         {method: http.MethodPost, path: controlplane.GatewayPrefix + "/v1/messages", wantStatus: http.StatusServiceUnavailable, wantCode: contract.CodeUnavailable},
		"gateway not configured, GET":    {method: http.MethodGet, path: controlplane.GatewayPrefix + "/v1/models", wantStatus: http.StatusServiceUnavailable, wantCode: contract.CodeUnavailable},
		"gateway configured gets prefix": {gateway: gateway, method: http.MethodPost, path: controlplane.GatewayPrefix + "/v1/messages", wantStatus: http.StatusTeapot},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{gateway: tt.gateway})
			resp, body := h.do(tt.method, tt.path, "", nil)
			if tt.wantCode != "" {
				wantError(t, resp, body, tt.wantStatus, tt.wantCode)
				return
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.gateway != nil {
				if got := <-gatewayHit; got != tt.path {
					t.Errorf("gateway saw %q, want %q", got, tt.path)
				}
			}
		})
	}
	t.Run("healthz body", func(t *testing.T) {
		h := newHarness(t, harnessOptions{})
		_, body := h.do(http.MethodGet, "/healthz", "", nil)
		if diff := cmp.Diff(`{"status":"ok"}`, strings.TrimSpace(string(body))); diff != "" {
			t.Errorf("healthz (-want +got):\n%s", diff)
		}
	})
}
