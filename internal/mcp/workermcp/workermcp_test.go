package workermcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/build/buildtest"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/mcp/issuetracking"
	"github.com/talkide/platform/internal/mcp/workermcp"
	"github.com/talkide/platform/internal/proctest"
	"github.com/talkide/platform/internal/sandbox/sandboxtest"
	"github.com/talkide/platform/internal/trust"
)

// The test binary is the sandbox's helper: Build's local runner starts
// ./gradlew through it.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

var envKey = bytes.Repeat([]byte("k"), 32)

// capability stands for the local proxy's per-conversation credential.
func capability(conv string) string { return "tlp_cap-of-" + conv }

// fakeCP is the control-plane's issue endpoint: it checks the worker's
// signature as the real one does and records what it was asked.
type fakeCP struct {
	srv      *httptest.Server
	verifier *trust.Verifier

	mu      sync.Mutex
	creates []contract.CreateIssueRequest // guarded by mu
}

func startFakeCP(t testing.TB) *fakeCP {
	f := &fakeCP{verifier: trust.NewVerifier(trust.ToControlPlane, func(te, e, k string) ([]byte, bool) {
		return envKey, te == "acme" && e == "dev" && k == "c1"
	}, nil)}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if _, err := f.verifier.Verify(r, body); err != nil {
			http.Error(w, `{"error":{"code":"unauthorized","message":"bad signature"}}`, http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != contract.IssuesPath {
			http.Error(w, `{"error":{"code":"not_found","message":"no"}}`, http.StatusNotFound)
			return
		}
		var req contract.CreateIssueRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":{"code":"bad_request","message":"json"}}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.creates = append(f.creates, req)
		n := len(f.creates)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(contract.Issue{ID: fmt.Sprintf("iss_%d", n), ConversationID: req.ConversationID, TurnID: req.TurnID,
			Title: req.Title, Body: req.Body, Severity: contract.SeverityMedium, Status: contract.IssueOpen, CreatedAt: time.Now(), UpdatedAt: time.Now()})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCP) created() []contract.CreateIssueRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]contract.CreateIssueRequest(nil), f.creates...)
}

// turns stands for the harness's record of running turns: a conversation's
// turn and the tool_use ids it started, by tool name.
type turns struct {
	mu   sync.Mutex
	runs map[string]*run // guarded by mu
}

type run struct {
	turn   *harness.Turn
	uses   map[string]string
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	events []contract.Event // guarded by mu
}

func (ts *turns) start(t testing.TB, conv, ws string, uses map[string]string) *run {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &run{uses: uses, ctx: ctx, cancel: cancel}
	r.turn = &harness.Turn{ConversationID: conv, TurnID: "t_" + conv, SessionDir: t.TempDir(), Workspace: ws,
		Emit: func(ev contract.Event) { r.mu.Lock(); r.events = append(r.events, ev); r.mu.Unlock() }}
	if ws != "" {
		r.turn.Jail = sandboxtest.HostJail(t, ws)
	}
	ts.mu.Lock()
	if ts.runs == nil {
		ts.runs = map[string]*run{}
	}
	ts.runs[conv] = r
	ts.mu.Unlock()
	return r
}

func (ts *turns) resolve(_ context.Context, conv, tool, claimed string) (*harness.Turn, string, context.Context, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	r := ts.runs[conv]
	if r == nil {
		return nil, "", nil, errors.New("no turn of this conversation is running")
	}
	if r.uses[claimed] != tool {
		return nil, "", nil, fmt.Errorf("no call %s of %s", claimed, tool)
	}
	return r.turn, claimed, r.ctx, nil
}

func (r *run) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, ev := range r.events {
		if ev.Kind == contract.KindToolOutput {
			b.WriteString(ev.Tool.Output)
		}
	}
	return b.String()
}

type endpoint struct {
	srv   *httptest.Server
	cp    *fakeCP
	turns *turns
}

func startEndpoint(t testing.TB) *endpoint {
	cp := startFakeCP(t)
	signer := &trust.Signer{Direction: trust.ToControlPlane, Tenant: "acme", Env: "dev", KeyID: "c1", Key: envKey}
	e := &endpoint{cp: cp, turns: &turns{}}
	h := workermcp.New(workermcp.Options{
		Capability: capability,
		Resolve:    e.turns.resolve,
		Issues:     issuetracking.NewClient(cp.srv.URL, signer, nil),
		Builds:     build.NewLocal(nil),
	})
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

// bearer adds an Authorization header to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an MCP session to server for conv, presenting token.
func (e *endpoint) connect(t *testing.T, conv, server, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: e.srv.URL + "/" + conv + "/mcp/" + server, HTTPClient: &http.Client{Transport: bearer{token}}, DisableStandaloneSSE: true,
	}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// A request without the conversation's own capability is 401, in JSON,
// before any MCP handling; a bad path is 400 and an unknown server 404.
func TestRefusals(t *testing.T) {
	e := startEndpoint(t)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	cases := []struct {
		name, path, auth string
		status           int
		code             string
	}{
		{"no credential", "/c_a/mcp/talkide-build", "", 401, "unauthorized"},
		{"wrong credential", "/c_a/mcp/talkide-build", "Bearer tlp_nope", 401, "unauthorized"},
		{"another conversation's capability", "/c_a/mcp/talkide-issue-tracking", "Bearer " + capability("c_b"), 401, "unauthorized"},
		{"not a bearer token", "/c_a/mcp/talkide-build", "Basic " + capability("c_a"), 401, "unauthorized"},
		{"dot dot id", "/../mcp/talkide-build", "Bearer " + capability(".."), 400, "invalid_id"},
		{"encoded slash in the id", "/c%2Fa/mcp/talkide-build", "Bearer " + capability("c/a"), 400, "invalid_id"},
		{"no server", "/c_a/mcp", "Bearer " + capability("c_a"), 404, "not_found"},
		{"extra segment", "/c_a/mcp/talkide-build/x", "Bearer " + capability("c_a"), 404, "not_found"},
		{"unknown server", "/c_a/mcp/other", "Bearer " + capability("c_a"), 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+c.path, strings.NewReader(init))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body contract.Error
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("status %d, body not JSON: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != c.status || body.Error.Code != c.code {
				t.Errorf("status %d %+v, want %d %s", resp.StatusCode, body.Error, c.status, c.code)
			}
			if strings.Contains(body.Error.Message, "tlp_") {
				t.Errorf("the answer quotes a credential: %q", body.Error.Message)
			}
		})
	}
	if _, err := e.connect(t, "c_a", "talkide-build", capability("c_b")); err == nil {
		t.Error("an MCP client with another conversation's capability connected")
	}
	if len(e.cp.created()) != 0 {
		t.Errorf("the control-plane was called: %+v", e.cp.created())
	}
}

// A body over MaxBody is refused without a call made.
func TestBodyBounded(t *testing.T) {
	e := startEndpoint(t)
	e.turns.start(t, "c_a", "", map[string]string{"toolu_1": "mcp__talkide-issue-tracking__report_issue"})
	cs, err := e.connect(t, "c_a", issuetracking.ServerName, capability("c_a"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "report_issue",
		Meta:      mcp.Meta{workermcp.ClaudeCodeToolUseMeta: "toolu_1"},
		Arguments: map[string]any{"title": "big", "body": strings.Repeat("x", workermcp.MaxBody)}})
	if err == nil {
		t.Error("a call with a body over the bound went through")
	}
	if len(e.cp.created()) != 0 {
		t.Errorf("the control-plane was called: %+v", e.cp.created())
	}
}

// The issue tracker acts for the capability's conversation and the running
// turn's tool_use, whatever the client puts in _meta; a call that matches
// no tool_use of the running turn, or comes while no turn runs, is refused.
func TestIssueScope(t *testing.T) {
	e := startEndpoint(t)
	cs, err := e.connect(t, "c_a", issuetracking.ServerName, capability("c_a"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(toolUse string) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "report_issue",
			Meta: mcp.Meta{workermcp.ClaudeCodeToolUseMeta: toolUse,
				issuetracking.MetaConversation: "c_b", issuetracking.MetaTurn: "t_forged", issuetracking.MetaToolUse: "toolu_forged"},
			Arguments: map[string]any{"title": "Flaky", "body": "fails"}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call("toolu_1"); !res.IsError || !strings.Contains(text(res), "no turn of this conversation is running") {
		t.Errorf("a call without a running turn: %+v %q", res.IsError, text(res))
	}
	e.turns.start(t, "c_a", "", map[string]string{"toolu_1": "mcp__talkide-issue-tracking__report_issue", "toolu_2": "Bash"})
	for _, id := range []string{"toolu_2", "toolu_9", ""} {
		if res := call(id); !res.IsError || !strings.Contains(text(res), "does not belong to a tool call") {
			t.Errorf("a call claiming %q: %+v %q", id, res.IsError, text(res))
		}
	}
	if n := len(e.cp.created()); n != 0 {
		t.Fatalf("refused calls reached the control-plane: %d", n)
	}
	res := call("toolu_1")
	if res.IsError || !strings.Contains(text(res), "Filed issue iss_1") || res.StructuredContent != nil {
		t.Fatalf("the call: %+v %q (structured %v)", res.IsError, text(res), res.StructuredContent)
	}
	got := e.cp.created()
	if len(got) != 1 || got[0].ConversationID != "c_a" || got[0].TurnID != "t_c_a" || got[0].IdempotencyKey != "c_a/issue-toolu_1" {
		t.Errorf("the control-plane was asked %+v", got)
	}
}

// A session opened with one conversation's capability cannot be used under
// another's, even with that one's own capability.
func TestSessionStaysWithItsConversation(t *testing.T) {
	e := startEndpoint(t)
	post := func(conv, session, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/"+conv+"/mcp/talkide-build", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+capability(conv))
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := post("c_a", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, session)
	}
	if resp := post("c_b", session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); resp.StatusCode == http.StatusOK {
		t.Errorf("conversation c_b used c_a's session: %d", resp.StatusCode)
	}
}

// Build over MCP: the tool's definition is the native one's; the summary is
// the result, the log streams as tool.output of the tool_use; bad input is
// an error result.
func TestBuild(t *testing.T) {
	e := startEndpoint(t)
	ws := buildtest.Workspace(t)
	r := e.turns.start(t, "c_a", ws, map[string]string{"toolu_b": workermcp.BuildToolName, "toolu_bad": workermcp.BuildToolName})
	cs, err := e.connect(t, "c_a", workermcp.BuildServer, capability("c_a"))
	if err != nil {
		t.Fatal(err)
	}
	var defs []*mcp.Tool
	for def, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		defs = append(defs, def)
	}
	if len(defs) != 1 || defs[0].Name != "Build" || !strings.Contains(defs[0].Description, "./gradlew") {
		t.Fatalf("tools: %+v", defs)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "Build", Meta: mcp.Meta{workermcp.ClaudeCodeToolUseMeta: "toolu_b"},
		Arguments: map[string]any{"tasks": []string{"failing"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Build FAILED: ./gradlew failing (exit status 1", "Tests: 2 run, 1 passed, 1 failed"} {
		if !strings.Contains(text(res), want) || !res.IsError {
			t.Errorf("result (error %v) lacks %q:\n%s", res.IsError, want, text(res))
		}
	}
	if out := r.output(); !strings.Contains(out, "FailTest > breaks() FAILED") {
		t.Errorf("live output: %q", out)
	}
	r.mu.Lock()
	for _, ev := range r.events {
		if ev.Kind == contract.KindToolOutput && (ev.Tool.ID != "toolu_b" || ev.Tool.Name != workermcp.BuildToolName) {
			t.Errorf("tool.output names %s %s", ev.Tool.ID, ev.Tool.Name)
		}
	}
	r.mu.Unlock()
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "Build", Meta: mcp.Meta{workermcp.ClaudeCodeToolUseMeta: "toolu_bad"},
		Arguments: map[string]any{"tasks": []string{"test; rm -rf /"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text(res), "Build:") {
		t.Errorf("bad input: %v %q", res.IsError, text(res))
	}
}

// processesIn counts the processes whose working directory is dir.
func processesIn(dir string) int {
	return len(proctest.Pids(func(pid int) bool { return proctest.Cwd(pid) == dir }))
}

// A build stops when its turn ends (an interrupt kills the CLI, whose
// request is never cancelled) and when the client cancels the call.
func TestBuildCancelled(t *testing.T) {
	for _, how := range []string{"turn ends", "client cancels"} {
		t.Run(how, func(t *testing.T) {
			e := startEndpoint(t)
			ws := buildtest.Workspace(t)
			r := e.turns.start(t, "c_a", ws, map[string]string{"toolu_s": workermcp.BuildToolName})
			cs, err := e.connect(t, "c_a", workermcp.BuildServer, capability("c_a"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "Build", Meta: mcp.Meta{workermcp.ClaudeCodeToolUseMeta: "toolu_s"},
					Arguments: map[string]any{"tasks": []string{"slow"}}})
				done <- err
			}()
			for !strings.Contains(r.output(), "> Task :slow") {
				time.Sleep(10 * time.Millisecond)
			}
			if processesIn(ws) == 0 {
				t.Fatal("no build process runs in the workspace")
			}
			if how == "turn ends" {
				r.cancel()
			} else {
				cancel()
			}
			deadline := time.Now().Add(10 * time.Second)
			for processesIn(ws) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d build processes left after the cancel", processesIn(ws))
				}
				time.Sleep(10 * time.Millisecond)
			}
			if how == "turn ends" {
				if err := <-done; err == nil {
					t.Error("the call of an ended turn succeeded")
				}
			}
		})
	}
}

// BenchmarkIssueCall is one report_issue through the endpoint: the MCP
// request over loopback HTTP, the bearer checks, the turn's resolution and
// the signed call to a control-plane that answers at once.
func BenchmarkIssueCall(b *testing.B) {
	e := startEndpoint(b)
	e.turns.start(b, "c_a", "", map[string]string{"toolu_1": "mcp__talkide-issue-tracking__report_issue"})
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: e.srv.URL + "/c_a/mcp/" + issuetracking.ServerName, HTTPClient: &http.Client{Transport: bearer{capability("c_a")}}, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "report_issue", Meta: mcp.Meta{workermcp.ClaudeCodeToolUseMeta: "toolu_1"},
		Arguments: map[string]any{"title": "Flaky", "body": "fails one run in ten"}}
	b.ResetTimer()
	for b.Loop() {
		res, err := cs.CallTool(context.Background(), params)
		if err != nil || res.IsError {
			b.Fatalf("%v %+v", err, res)
		}
	}
}
