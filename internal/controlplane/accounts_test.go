package controlplane_test

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/fakeclock"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/store/storetest"
	"github.com/talkide/platform/internal/trust"
)

// recordingWorker stands in for one tenant-env's worker: it answers the
// commands the browser API relays with minimal contract JSON and records
// each, so that a test sees which worker a request reached. (The
// signatures are checked by fakeWorker's tests; this one checks routing.)
type recordingWorker struct {
	name string
	srv  *httptest.Server

	mu       sync.Mutex
	requests []string // "METHOD path", guarded by mu
}

func startRecordingWorker(t *testing.T, name string) *recordingWorker {
	t.Helper()
	rw := &recordingWorker{name: name}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+contract.SessionsPath, func(w http.ResponseWriter, r *http.Request) {
		var req contract.CreateSessionRequest
		if decodeRequest(w, r, &req) != nil {
			return
		}
		httpapi.WriteJSON(w, http.StatusCreated, contract.SessionState{ConversationID: req.ConversationID, Created: true, Status: contract.StatusIdle, CreatedAt: start, Harness: "fake"})
	})
	mux.HandleFunc("GET "+contract.SessionPath, func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, contract.SessionState{ConversationID: r.PathValue("id"), Status: contract.StatusIdle, CreatedAt: start, Harness: "fake"})
	})
	mux.HandleFunc("POST "+contract.MessagesPath, func(w http.ResponseWriter, r *http.Request) {
		var req contract.SendMessageRequest
		if decodeRequest(w, r, &req) != nil {
			return
		}
		httpapi.WriteJSON(w, http.StatusAccepted, contract.SendMessageResponse{ConversationID: r.PathValue("id"), ClientMessageID: req.ClientMessageID, TurnID: "t_1", Seq: 1})
	})
	mux.HandleFunc("POST "+contract.InterruptPath, func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, contract.InterruptResponse{ConversationID: r.PathValue("id"), TurnID: "t_1", Interrupted: true})
	})
	mux.HandleFunc("POST "+contract.AttachmentsPath, func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusCreated, contract.Attachment{Path: "attachments/" + r.URL.Query().Get("name"), Size: 2})
	})
	mux.HandleFunc("GET "+contract.StreamPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		<-r.Context().Done()
	})
	rw.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw.mu.Lock()
		rw.requests = append(rw.requests, r.Method+" "+r.URL.Path)
		rw.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(rw.srv.Close)
	return rw
}

func (rw *recordingWorker) Requests() []string {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return slices.Clone(rw.requests)
}

// tenancy is a control-plane without a local user, authenticating with
// API tokens and session cookies, over three tenant-envs:
//
//	acme/prod, acme/staging, beta/prod
//
// and these users:
//
//	alice, bob  members of acme (every env)
//	carol       tenant-admin of acme
//	frank       member of acme/staging only
//	dave        member of beta
//	erin        tenant-admin of beta
type tenancy struct {
	t       *testing.T
	url     string
	client  *http.Client
	store   *sqlite.Store
	clock   *fakeclock.Clock
	cp      *controlplane.Server
	workers map[string]*recordingWorker // by "tenant/env"
	tokens  map[string]string           // API token by user
	budget  *budget.Service             // nil without one
}

var tenancyMembers = []store.Membership{
	{UserID: "alice", Tenant: "acme", Role: store.RoleMember},
	{UserID: "bob", Tenant: "acme", Role: store.RoleMember},
	{UserID: "carol", Tenant: "acme", Role: store.RoleTenantAdmin},
	{UserID: "frank", Tenant: "acme", Env: "staging", Role: store.RoleMember},
	{UserID: "dave", Tenant: "beta", Role: store.RoleMember},
	{UserID: "erin", Tenant: "beta", Role: store.RoleTenantAdmin},
}

func newTenancy(t *testing.T, opts *auth.Options) *tenancy {
	t.Helper()
	return newTenancyBudget(t, opts, true)
}

// newTenancyBudget is newTenancy with or without a budget service.
func newTenancyBudget(t *testing.T, opts *auth.Options, withBudget bool) *tenancy {
	t.Helper()
	ctx := t.Context()
	clk := fakeclock.New(start)
	st := storetest.Open(t, sqlite.Open, filepath.Join(t.TempDir(), "cp.db"))
	kr, err := trust.NewKeyring(tokenKID, map[string][]byte{tokenKID: tokenKey})
	if err != nil {
		t.Fatal(err)
	}
	tn := &tenancy{t: t, store: st, clock: clk, workers: map[string]*recordingWorker{}, tokens: map[string]string{}}
	for _, te := range []string{"acme/prod", "acme/staging", "beta/prod"} {
		tenant, env, _ := strings.Cut(te, "/")
		rw := startRecordingWorker(t, te)
		tn.workers[te] = rw
		must(t, st.PutEnv(ctx, store.Env{Tenant: tenant, Name: env, WorkerURL: rw.srv.URL, CreatedAt: start}))
	}
	for _, m := range tenancyMembers {
		must(t, st.PutUser(ctx, store.User{ID: m.UserID, Name: m.UserID, CreatedAt: start}))
		m.CreatedAt = start
		_, err := st.PutMembership(ctx, m)
		must(t, err)
		tok, _, err := auth.IssueAPIToken(ctx, st, m.UserID, "test", 0, start)
		must(t, err)
		tn.tokens[m.UserID] = tok
	}
	var o auth.Options
	if opts != nil {
		o = *opts
	}
	o.Now = clk.Now
	a, err := auth.New(st, &o)
	must(t, err)
	if withBudget {
		tn.budget = budget.New(st, budget.DefaultPrices(), &budget.Options{Now: clk.Now})
		t.Cleanup(func() { tn.budget.Close(context.Background()) })
	}
	tn.cp, err = controlplane.New(st, controlplane.Keys{Tokens: kr, CommandSecret: commandSecret, CommandKeyID: commandKID},
		controlplane.TenantEnv{Tenant: "acme", Env: "prod"}, &controlplane.Options{Auth: a, Now: clk.Now, Budget: tn.budget})
	must(t, err)
	srv := httptest.NewServer(tn.cp.PublicHandler())
	t.Cleanup(srv.Close)
	tn.url, tn.client = srv.URL, srv.Client()
	return tn
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// as sends a request with user's API token ("" for none) and returns the
// status and body.
func (tn *tenancy) as(user, method, path, body string, header http.Header) (*http.Response, []byte) {
	tn.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(tn.t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, tn.url+path, rd)
	must(tn.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+tn.tokens[user])
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := tn.client.Do(req)
	must(tn.t, err)
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A stream that opened: its status is the answer.
		return resp, nil
	}
	data, err := io.ReadAll(resp.Body)
	must(tn.t, err)
	return resp, data
}

// reach has each of users GET each of paths and checks the status: 200
// for the paths allowed[user] names, 404 for the others, each of which
// refused, when set, checks further.
func (tn *tenancy) reach(users []string, paths map[string]string, allowed map[string][]string, refused func(user, path string, resp *http.Response, body []byte)) {
	tn.t.Helper()
	for _, user := range users {
		for name, p := range paths {
			want := http.StatusNotFound
			if slices.Contains(allowed[user], name) {
				want = http.StatusOK
			}
			resp, body := tn.as(user, http.MethodGet, p, "", nil)
			if resp.StatusCode != want {
				tn.t.Errorf("%s GET %s: %d, want %d: %s", user, p, resp.StatusCode, want, body)
			}
			if want == http.StatusNotFound && refused != nil {
				refused(user, p, resp, body)
			}
		}
	}
}

// create makes a conversation as user in tenant/env ("" for the default).
func (tn *tenancy) create(user, id, tenantEnv string) {
	tn.t.Helper()
	body := `{"id":"` + id + `"}`
	if tenantEnv != "" {
		tenant, env, _ := strings.Cut(tenantEnv, "/")
		body = `{"id":"` + id + `","tenant":"` + tenant + `","env":"` + env + `"}`
	}
	resp, data := tn.as(user, http.MethodPost, "/api/conversations", body, nil)
	if resp.StatusCode != http.StatusCreated {
		tn.t.Fatalf("%s creates %s in %q: %d %s", user, id, tenantEnv, resp.StatusCode, data)
	}
}

func (tn *tenancy) list(user string) []string {
	tn.t.Helper()
	resp, data := tn.as(user, http.MethodGet, "/api/conversations", "", nil)
	if resp.StatusCode != http.StatusOK {
		tn.t.Fatalf("%s lists: %d %s", user, resp.StatusCode, data)
	}
	var out struct {
		Conversations []controlplane.ConversationView `json:"conversations"`
	}
	decodeJSON(tn.t, data, &out)
	var ids []string
	for _, c := range out.Conversations {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestIsolation: who may reach which conversation's state, stream, issues,
// usage, reports, interrupt and messages. A refusal is 404, as for a conversation
// that does not exist, except that a tenant-admin who may see a
// conversation is told (403) that only its owner sends messages in it.
func TestIsolation(t *testing.T) {
	tn := newTenancy(t, nil)
	ctx := t.Context()
	tn.create("alice", "a1", "acme/prod")
	tn.create("bob", "b1", "acme/staging")
	tn.create("dave", "d1", "beta/prod")
	must(t, tn.store.RecordUsage(ctx, store.UsageRecord{ID: "u1", Tenant: "acme", Env: "prod", ConversationID: "a1", UserID: "alice", Model: "m", StartedAt: start}))
	_, _, err := tn.store.CreateIssue(ctx, store.Issue{ID: "i1", Tenant: "acme", Env: "prod", ConversationID: "a1", UserID: "alice", TurnID: "t_1",
		IdempotencyKey: "k1", Title: "t", Body: "b", Severity: "low", Status: "open", CreatedAt: start, UpdatedAt: start})
	must(t, err)

	type endpoint struct{ method, path, body string }
	endpoints := map[string]endpoint{
		"state":     {http.MethodGet, "/api/conversations/%s", ""},
		"stream":    {http.MethodGet, "/api/conversations/%s/stream", ""},
		"issues":    {http.MethodGet, "/api/conversations/%s/issues", ""},
		"usage":     {http.MethodGet, "/api/conversations/%s/usage", ""},
		"reports":   {http.MethodGet, "/api/conversations/%s/reports?kind=tool_use&limit=5", ""},
		"interrupt": {http.MethodPost, "/api/conversations/%s/interrupt", ""},
		"messages":  {http.MethodPost, "/api/conversations/%s/messages", `{"text":"hi"}`},
		"rename":    {http.MethodPatch, "/api/conversations/%s", `{"title":"mine now"}`},
		"attach":    {http.MethodPost, "/api/conversations/%s/attachments?name=a.txt", "hi"},
	}
	// want[user][conversation] is the status of every endpoint but
	// messages, and wantSend that of messages.
	type access struct{ read, send int }
	ok, no := access{http.StatusOK, http.StatusAccepted}, access{http.StatusNotFound, http.StatusNotFound}
	admin := access{http.StatusOK, http.StatusForbidden}
	want := map[string]map[string]access{
		"alice": {"a1": ok, "b1": no, "d1": no},
		"bob":   {"a1": no, "b1": ok, "d1": no},
		"carol": {"a1": admin, "b1": admin, "d1": no},
		"frank": {"a1": no, "b1": no, "d1": no},
		"dave":  {"a1": no, "b1": no, "d1": ok},
		"erin":  {"a1": no, "b1": no, "d1": admin},
	}
	for user, convs := range want {
		for conv, acc := range convs {
			for name, ep := range endpoints {
				t.Run(user+"/"+conv+"/"+name, func(t *testing.T) {
					var hdr http.Header
					if name == "attach" {
						hdr = http.Header{"Content-Type": {"application/octet-stream"}}
					}
					resp, body := tn.as(user, ep.method, strings.Replace(ep.path, "%s", conv, 1), ep.body, hdr)
					w := acc.read
					switch {
					case name == "messages":
						w = acc.send
					case name == "attach" && acc.send == http.StatusAccepted:
						w = http.StatusCreated // the owner's upload
					case name == "attach":
						w = acc.send
					case name == "rename" && acc.send == http.StatusAccepted:
						w = http.StatusOK // the owner's rename
					case name == "rename":
						w = acc.send
					}
					if resp.StatusCode != w {
						t.Errorf("status %d, want %d: %s", resp.StatusCode, w, body)
					}
					if w == http.StatusNotFound && strings.Contains(string(body), "alice") {
						t.Errorf("a refusal names the owner: %s", body)
					}
				})
			}
		}
	}

	lists := map[string][]string{
		"alice": {"a1"}, "bob": {"b1"}, "carol": {"a1", "b1"}, "frank": nil, "dave": {"d1"}, "erin": {"d1"},
	}
	for user, w := range lists {
		if got := tn.list(user); !slices.Equal(got, w) {
			t.Errorf("%s lists %v, want %v", user, got, w)
		}
	}

	// Without a valid token: 401, and nothing reaches a worker.
	before := len(tn.workers["acme/prod"].Requests())
	for name, h := range map[string]http.Header{
		"no credential":      nil,
		"another's secret":   {"Authorization": {"Bearer " + tn.tokens["alice"][:strings.Index(tn.tokens["alice"], ".")] + tn.tokens["bob"][strings.Index(tn.tokens["bob"], "."):]}},
		"an operator token":  {"Authorization": {"Bearer tko_abc.def"}},
		"basic":              {"Authorization": {"Basic YWxpY2U6eA=="}},
		"unknown session":    {"Cookie": {auth.SessionCookie + "=nope"}},
		"an untrusted proxy": {"X-Forwarded-User": {"alice"}},
	} {
		resp, body := tn.as("", http.MethodPost, "/api/conversations/a1/messages", `{"text":"hi"}`, h)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401: %s", name, resp.StatusCode, body)
		}
	}
	if got := tn.workers["acme/prod"].Requests(); len(got) != before {
		t.Errorf("refused requests reached the worker: %v", got[before:])
	}

	// A rename sent as a form, which a page of another site could send
	// without a preflight, is refused before it is read.
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded"} {
		resp, body := tn.as("alice", http.MethodPatch, "/api/conversations/a1", `{"title":"by a form"}`, http.Header{"Content-Type": {ct}})
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("a %s rename: %d %s", ct, resp.StatusCode, body)
		}
	}
	if c, err := tn.store.GetConversation(ctx, "a1"); err != nil || c.Title == "by a form" {
		t.Errorf("a1 after the form renames: %+v, %v", c, err)
	}
	// So is an attachment sent as a form or as JSON: only
	// application/octet-stream, which needs a preflight, is read.
	before = len(tn.workers["acme/prod"].Requests())
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json", ""} {
		resp, body := tn.as("alice", http.MethodPost, "/api/conversations/a1/attachments?name=a.txt", "by a form", http.Header{"Content-Type": {ct}})
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("a %q attachment: %d %s", ct, resp.StatusCode, body)
		}
	}
	if got := tn.workers["acme/prod"].Requests(); len(got) != before {
		t.Errorf("refused attachments reached the worker: %v", got[before:])
	}

	// A member removed from the tenant no longer sees their own
	// conversations.
	must(t, tn.store.DeleteMembership(ctx, "alice", "acme", ""))
	if resp, body := tn.as("alice", http.MethodGet, "/api/conversations/a1", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a removed member reads their conversation: %d %s", resp.StatusCode, body)
	}
	if got := tn.list("alice"); len(got) != 0 {
		t.Errorf("a removed member lists %v", got)
	}
}

// TestConversationEnv: a new conversation goes to the tenant-env chosen
// among the caller's, and every later request about it reaches the worker
// of the tenant-env stored with it, whatever the request says.
func TestConversationEnv(t *testing.T) {
	tn := newTenancy(t, nil)
	tests := map[string]struct {
		user, body string
		status     int
		wantEnv    string // the worker that got the session, on success
	}{
		"default":                     {user: "alice", body: `{"id":"c1"}`, status: 201, wantEnv: "acme/prod"},
		"chosen":                      {user: "alice", body: `{"id":"c2","tenant":"acme","env":"staging"}`, status: 201, wantEnv: "acme/staging"},
		"the only one":                {user: "frank", body: `{"id":"c3"}`, status: 201, wantEnv: "acme/staging"},
		"the only one, not default":   {user: "dave", body: `{"id":"c4"}`, status: 201, wantEnv: "beta/prod"},
		"another tenant's":            {user: "alice", body: `{"id":"c5","tenant":"beta","env":"prod"}`, status: 404},
		"an env the member is not in": {user: "frank", body: `{"id":"c6","tenant":"acme","env":"prod"}`, status: 404},
		"an env that does not exist":  {user: "alice", body: `{"id":"c7","tenant":"acme","env":"nope"}`, status: 404},
		"tenant without env":          {user: "alice", body: `{"id":"c8","tenant":"acme"}`, status: 400},
		"bad env id":                  {user: "alice", body: `{"id":"c9","tenant":"acme","env":"../x"}`, status: 400},
		"same id in another env":      {user: "alice", body: `{"id":"c1","tenant":"acme","env":"staging"}`, status: 409},
		"unknown field (worker url)":  {user: "alice", body: `{"id":"c10","worker_url":"http://evil"}`, status: 400},
	}
	// Run in a fixed order: "same id in another env" needs c1.
	names := make([]string, 0, len(tests))
	for name := range tests {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if (a == "default") != (b == "default") {
			return map[bool]int{true: -1, false: 1}[a == "default"]
		}
		return strings.Compare(a, b)
	})
	for _, name := range names {
		tt := tests[name]
		counts := map[string]int{}
		for te, w := range tn.workers {
			counts[te] = len(w.Requests())
		}
		resp, body := tn.as(tt.user, http.MethodPost, "/api/conversations", tt.body, nil)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, tt.status, body)
			continue
		}
		for te, w := range tn.workers {
			got := len(w.Requests()) - counts[te]
			if wantN := map[bool]int{true: 1}[te == tt.wantEnv]; got != wantN {
				t.Errorf("%s: worker %s got %d requests, want %d", name, te, got, wantN)
			}
		}
	}

	// c1 lives in acme/prod: a send that names another tenant-env in its
	// query, headers or body still reaches acme/prod's worker, or is
	// refused.
	staging := len(tn.workers["acme/staging"].Requests())
	prod := len(tn.workers["acme/prod"].Requests())
	h := http.Header{"X-Talkide-Tenant": {"beta"}, "X-Talkide-Env": {"staging"}}
	if resp, body := tn.as("alice", http.MethodPost, "/api/conversations/c1/messages?tenant=acme&env=staging", `{"text":"hi"}`, h); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %d %s", resp.StatusCode, body)
	}
	if resp, _ := tn.as("alice", http.MethodPost, "/api/conversations/c1/messages", `{"text":"hi","env":"staging"}`, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a send with an env field: %d, want 400", resp.StatusCode)
	}
	if got := len(tn.workers["acme/staging"].Requests()); got != staging {
		t.Errorf("acme/staging's worker got %d requests about c1", got-staging)
	}
	if got := len(tn.workers["acme/prod"].Requests()); got != prod+1 {
		t.Errorf("acme/prod's worker got %d requests, want 1", got-prod)
	}
}

// TestRetiredEnvNotOffered: a tenant-env retired by talkide admin env
// delete is no longer one a new conversation can go to: a member of the
// tenant whose default is gone gets their only live env, a member of only
// the retired env belongs to none, and naming it is refused.
func TestRetiredEnvNotOffered(t *testing.T) {
	tn := newTenancy(t, nil)
	must(t, tn.store.RetireEnv(t.Context(), "acme", "prod", start))
	for name, tt := range map[string]struct {
		user, body string
		status     int
		wantEnv    string
	}{
		"the only live one": {user: "alice", body: `{"id":"r1"}`, status: 201, wantEnv: "acme/staging"},
		"named, retired":    {user: "alice", body: `{"id":"r2","tenant":"acme","env":"prod"}`, status: 404},
	} {
		resp, body := tn.as(tt.user, http.MethodPost, "/api/conversations", tt.body, nil)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, tt.status, body)
		}
		if tt.wantEnv != "" && !strings.Contains(string(body), `"env":"staging"`) {
			t.Errorf("%s: %s, want %s", name, body, tt.wantEnv)
		}
	}
	must(t, tn.store.RetireEnv(t.Context(), "acme", "staging", start))
	if resp, body := tn.as("frank", http.MethodPost, "/api/conversations", `{"id":"r3"}`, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a member of only a retired env: %d %s, want 403", resp.StatusCode, body)
	}
}

// TestCrossOriginRefused: with the victim's session cookie, a cross-origin
// page's form POST and fetch POST are refused with 403 and start no turn;
// the same request from the control-plane's own origin goes through.
func TestCrossOriginRefused(t *testing.T) {
	tn := newTenancy(t, nil)
	tn.create("alice", "a1", "acme/prod")
	id := "victim-session-id"
	must(t, tn.store.CreateBrowserSession(t.Context(), store.BrowserSession{Hash: sha256.Sum256([]byte(id)), UserID: "alice",
		CreatedAt: start, LastSeenAt: start, ExpiresAt: start.Add(time.Hour)}))
	cookie := auth.SessionCookie + "=" + id
	tests := map[string]struct {
		contentType, body string
		header            http.Header
		want              int
	}{
		"form post": {contentType: "application/x-www-form-urlencoded", body: "text=hi",
			header: http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}}, want: 403},
		"fetch post, no-cors text/plain": {contentType: "text/plain", body: `{"text":"hi"}`,
			header: http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"no-cors"}}, want: 403},
		"fetch post, json": {contentType: "application/json", body: `{"text":"hi"}`,
			header: http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"cors"}}, want: 403},
		"same-site, another origin": {contentType: "application/json", body: `{"text":"hi"}`,
			header: http.Header{"Origin": {"https://other.talkide.example"}, "Sec-Fetch-Site": {"same-site"}}, want: 403},
		"an old browser, Origin only": {contentType: "application/json", body: `{"text":"hi"}`,
			header: http.Header{"Origin": {"https://evil.example"}}, want: 403},
		"same origin": {contentType: "application/json", body: `{"text":"hi"}`,
			header: http.Header{"Sec-Fetch-Site": {"same-origin"}}, want: 202},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			before := len(tn.workers["acme/prod"].Requests())
			h := tt.header.Clone()
			h.Set("Cookie", cookie)
			h.Set("Content-Type", tt.contentType)
			resp, body := tn.as("", http.MethodPost, "/api/conversations/a1/messages", tt.body, h)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			sent := len(tn.workers["acme/prod"].Requests()) - before
			if tt.want == 403 && sent != 0 {
				t.Errorf("a refused request reached the worker")
			}
			if tt.want == 202 && sent != 1 {
				t.Errorf("the worker got %d requests, want 1", sent)
			}
		})
	}
	// Logout too is a state change a cross-origin page cannot make.
	resp, _ := tn.as("", http.MethodPost, "/auth/logout", "", http.Header{"Cookie": {cookie}, "Sec-Fetch-Site": {"cross-site"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site logout: %d, want 403", resp.StatusCode)
	}
}

// TestListenersApart: each listener's handler answers 404 for the other
// listeners' endpoints, however the path is spelled.
func TestListenersApart(t *testing.T) {
	tn := newTenancy(t, nil)
	type want map[string]bool // path → served (not 404)
	internal := []string{
		controlplane.MintPath, contract.ReportsPath, contract.IssuesPath,
		controlplane.GatewayPrefix + "/v1/messages", controlplane.AdminPrefix + "/limits",
		"/api/conversations/../internal/gateway/anthropic/v1/messages", "/api/internal/worker/../worker/reports",
	}
	public := []string{"/api/conversations", "/auth/logout"}
	handlers := map[string]struct {
		h      http.Handler
		served func(p string) bool
	}{
		"public":   {tn.cp.PublicHandler(), func(p string) bool { return slices.Contains(public, p) }},
		"internal": {tn.cp.InternalHandler(), func(p string) bool { return slices.Contains(internal, p) }},
		"metrics":  {tn.cp.MetricsHandler(), func(p string) bool { return false }},
	}
	for name, hd := range handlers {
		srv := httptest.NewServer(hd.h)
		for _, p := range slices.Concat(internal, public, []string{"/metrics"}) {
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+p, nil)
				req.URL.Opaque = p // sent as written, dots and all
				resp, err := srv.Client().Do(req)
				must(t, err)
				resp.Body.Close()
				if got := resp.StatusCode != http.StatusNotFound; got != hd.served(p) {
					t.Errorf("%s listener: %s %s: status %d, want served=%v", name, method, p, resp.StatusCode, hd.served(p))
				}
			}
		}
		srv.Close()
	}
}
