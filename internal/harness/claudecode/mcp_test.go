package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/harness"
)

func mcpHarness(t *testing.T) *Harness {
	t.Helper()
	h, err := New("/bin/true", Proxy{
		BaseURLFor: func(conv string) string { return "http://127.0.0.1:1/" + conv },
		Capability: func(conv string) string { return "tlp_secret-of-" + conv },
	}, &Options{CallWait: 100 * time.Millisecond, MCPServers: []MCPServer{
		{Name: "talkide-build", URL: func(conv string) string { return "http://127.0.0.1:1/" + conv + "/mcp/talkide-build" }, Timeout: 2 * time.Hour},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The CLI is given the servers on its command line with the credential
// named, not written: the capability is only in its environment.
func TestMCPServersOnTheCommandLine(t *testing.T) {
	h := mcpHarness(t)
	args := h.args("c_a", "")
	i := slices.Index(args, "--mcp-config")
	if i < 0 || !slices.Contains(args, "--strict-mcp-config") {
		t.Fatalf("args %q lack --mcp-config or --strict-mcp-config", args)
	}
	var cfg struct {
		MCPServers map[string]struct {
			Type, URL string
			Headers   map[string]string
			Timeout   int64
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(args[i+1]), &cfg); err != nil {
		t.Fatal(err)
	}
	s := cfg.MCPServers["talkide-build"]
	if len(cfg.MCPServers) != 1 || s.Type != "http" || s.URL != "http://127.0.0.1:1/c_a/mcp/talkide-build" || s.Headers["Authorization"] != "Bearer ${TALKIDE_MCP_TOKEN}" ||
		s.Timeout != 7200000 {
		t.Errorf("--mcp-config %s", args[i+1])
	}
	allowed := args[slices.Index(args, "--allowedTools")+1]
	if !strings.HasSuffix(allowed, ",mcp__talkide-build") || !strings.HasPrefix(allowed, "Bash,") {
		t.Errorf("--allowedTools %s", allowed)
	}
	if strings.Contains(strings.Join(args, " "), "tlp_") {
		t.Errorf("the command line holds the capability: %q", args)
	}
	env := h.env("c_a", "/h", "/c")
	if !slices.Contains(env, "TALKIDE_MCP_TOKEN=tlp_secret-of-c_a") || !slices.Contains(env, "ENABLE_TOOL_SEARCH=false") {
		t.Errorf("env %q", env)
	}
	if _, err := New("/bin/true", h.proxy, &Options{ExtraEnv: []string{"TALKIDE_MCP_TOKEN=x"}}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("ExtraEnv setting TALKIDE_MCP_TOKEN: %v", err)
	}
	if _, err := New("/bin/true", h.proxy, &Options{MCPServers: []MCPServer{{Name: "x"}}}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("a server without a URL: %v", err)
	}
	// Without servers the command line and environment are as before.
	plain, _ := New("/bin/true", h.proxy, nil)
	if a := strings.Join(plain.args("c_a", ""), " "); strings.Contains(a, "mcp") {
		t.Errorf("args without servers: %s", a)
	}
	if e := strings.Join(plain.env("c_a", "/h", "/c"), " "); strings.Contains(e, "TALKIDE_MCP_TOKEN") {
		t.Errorf("env without servers: %s", e)
	}
}

// ResolveCall ties a call to the running turn's tool_use: the one the CLI
// names when the turn has it for that tool, else the oldest one not yet
// taken; it waits for the CLI's output to show it, and refuses when no turn
// runs, no such call comes, or the turn ends.
func TestResolveCall(t *testing.T) {
	h := mcpHarness(t)
	const build = "mcp__talkide-build__Build"
	ctx := context.Background()
	if _, _, _, err := h.ResolveCall(ctx, "c_a", build, "toolu_1"); !errors.Is(err, ErrNoCall) {
		t.Fatalf("no turn: %v", err)
	}
	turn := &harness.Turn{ConversationID: "c_a", TurnID: "t_1"}
	at, end := h.beginTurn(ctx, turn)

	// The call comes before the harness has read the tool_use.
	type resolved struct {
		turn   *harness.Turn
		id     string
		ctx    context.Context
		err    error
		waited bool
	}
	got := make(chan resolved, 1)
	started := make(chan struct{})
	go func() {
		tt, id, tctx, err := h.ResolveCall(ctx, "c_a", build, "toolu_1")
		select {
		case <-started:
			got <- resolved{tt, id, tctx, err, true}
		default:
			got <- resolved{tt, id, tctx, err, false}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	close(started)
	h.toolStarted(at, "toolu_1", build)
	r := <-got
	if r.err != nil || r.turn != turn || r.id != "toolu_1" || !r.waited {
		t.Fatalf("resolved %+v", r)
	}

	h.toolStarted(at, "toolu_2", "Bash")
	h.toolStarted(at, "toolu_3", build)
	for _, tc := range []struct {
		claimed, want string
	}{
		{"toolu_2", ""},        // not a call of this tool
		{"toolu_9", ""},        // no such call
		{"", "toolu_3"},        // the oldest of the tool not taken: toolu_1 was, by name
		{"", ""},               // none left
		{"toolu_3", "toolu_3"}, // named: believed, taken or not (a retry)
		{"toolu_1", "toolu_1"}, // likewise
	} {
		_, id, _, err := h.ResolveCall(ctx, "c_a", build, tc.claimed)
		if id != tc.want || (tc.want == "") != errors.Is(err, ErrNoCall) {
			t.Errorf("claimed %q: %q %v, want %q", tc.claimed, id, err, tc.want)
		}
	}
	if _, _, _, err := h.ResolveCall(ctx, "c_b", build, "toolu_1"); !errors.Is(err, ErrNoCall) {
		t.Errorf("another conversation: %v", err)
	}

	// The turn's end ends the call's context and a wait.
	waiting := make(chan error, 1)
	go func() { _, _, _, err := h.ResolveCall(ctx, "c_a", build, "toolu_late"); waiting <- err }()
	time.Sleep(10 * time.Millisecond)
	end()
	if err := <-waiting; !errors.Is(err, ErrNoCall) {
		t.Errorf("a wait across the turn's end: %v", err)
	}
	select {
	case <-r.ctx.Done():
	default:
		t.Error("the call's context outlived its turn")
	}
	if _, _, _, err := h.ResolveCall(ctx, "c_a", build, "toolu_1"); !errors.Is(err, ErrNoCall) {
		t.Errorf("after the turn: %v", err)
	}
}
