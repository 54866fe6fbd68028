package issuetracking_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/mcp/issuetracking"
)

// connect runs the server against fake control-plane f and returns an MCP
// client session to it over the SDK's in-memory transport.
func connect(t *testing.T, f *fakeCP) *mcp.ClientSession {
	t.Helper()
	srv := issuetracking.NewServer(f.client(nil), nil)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

func scoped(conv, turn, toolUse string) mcp.Meta {
	return mcp.Meta{issuetracking.MetaConversation: conv, issuetracking.MetaTurn: turn, issuetracking.MetaToolUse: toolUse}
}

// call calls a tool and returns its result's text.
func call(t *testing.T, cs *mcp.ClientSession, meta mcp.Meta, name string, args any) (string, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Meta: meta, Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool %s: %v", name, err)
	}
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	return strings.Join(texts, "\n"), res
}

func TestServerListsTools(t *testing.T) {
	f := startFakeCP(t)
	cs := connect(t, f)
	init := cs.InitializeResult()
	if init.ServerInfo.Name != issuetracking.ServerName || init.Instructions == "" {
		t.Errorf("server info %+v, instructions %q", init.ServerInfo, init.Instructions)
	}
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		got[tool.Name] = tool
	}
	if diff := cmp.Diff([]string{"comment_issue", "list_issues", "report_issue"}, slices.Sorted(func(yield func(string) bool) {
		for n := range got {
			if !yield(n) {
				return
			}
		}
	})); diff != "" {
		t.Fatalf("tools (-want +got):\n%s", diff)
	}
	// The schemas say what the control-plane enforces.
	var schema struct {
		Properties map[string]struct {
			Enum      []string `json:"enum"`
			MaxLength int      `json:"maxLength"`
			MaxItems  int      `json:"maxItems"`
			Default   any      `json:"default"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	b, _ := json.Marshal(got["report_issue"].InputSchema)
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	p := schema.Properties
	if !slices.Equal(p["severity"].Enum, contract.Severities) || p["severity"].Default != "medium" ||
		p["title"].MaxLength != contract.MaxIssueTitle || p["labels"].MaxItems != contract.MaxIssueLabels ||
		!slices.Equal(schema.Required, []string{"title", "body"}) {
		t.Errorf("report_issue schema: %s", b)
	}
	if a := got["list_issues"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Errorf("list_issues annotations %+v, want read-only", a)
	}
}

func TestServerTools(t *testing.T) {
	f := startFakeCP(t)
	cs := connect(t, f)
	meta := scoped("conv1", "t_1", "toolu_1")

	text, res := call(t, cs, meta, "report_issue", map[string]any{"title": "Flaky test", "body": "TestFoo fails one run in ten.", "labels": []string{"ci"}})
	if res.IsError || !strings.Contains(text, "Filed issue iss_1.") || !strings.Contains(text, "severity: medium") || !strings.Contains(text, "labels: ci") {
		t.Errorf("report_issue: error %v, text:\n%s", res.IsError, text)
	}
	var structured contract.Issue
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &structured); err != nil || structured.ID != "iss_1" {
		t.Errorf("structured content %s: %v", b, err)
	}
	want := contract.CreateIssueRequest{
		IdempotencyKey: "conv1/issue-toolu_1", ConversationID: "conv1", TurnID: "t_1",
		Title: "Flaky test", Body: "TestFoo fails one run in ten.", Severity: "medium", Labels: []string{"ci"},
	}
	if diff := cmp.Diff([]contract.CreateIssueRequest{want}, f.Creates()); diff != "" {
		t.Errorf("requests to the control-plane (-want +got):\n%s", diff)
	}

	// The same tool_use again (a retried call) files nothing new.
	text, res = call(t, cs, meta, "report_issue", map[string]any{"title": "Flaky test", "body": "again", "severity": "high"})
	if res.IsError || !strings.Contains(text, "already filed issue iss_1") || len(f.Issues()) != 1 {
		t.Errorf("retried report_issue: error %v, %d issues, text:\n%s", res.IsError, len(f.Issues()), text)
	}

	text, res = call(t, cs, scoped("conv1", "t_2", "toolu_2"), "comment_issue", map[string]any{"issue_id": "iss_1", "body": "Fixed by pinning the seed.", "status": "closed"})
	if res.IsError || !strings.Contains(text, "Commented on issue iss_1 and closed it") {
		t.Errorf("comment_issue: error %v, text:\n%s", res.IsError, text)
	}

	text, res = call(t, cs, scoped("conv1", "t_2", "toolu_3"), "list_issues", map[string]any{"status": "all"})
	if res.IsError || !strings.Contains(text, "1 issue in this conversation") || !strings.Contains(text, "## iss_1: Flaky test") ||
		!strings.Contains(text, "status: closed") || !strings.Contains(text, "(set status closed): Fixed by pinning the seed.") {
		t.Errorf("list_issues: error %v, text:\n%s", res.IsError, text)
	}
	text, _ = call(t, cs, scoped("conv1", "t_2", "toolu_4"), "list_issues", nil)
	if !strings.Contains(text, "no open issues") {
		t.Errorf("list_issues of open issues: %s", text)
	}
	if got := f.Requests(); countRequests(got, "status=open") != 1 || countRequests(got, "limit=20") != 2 {
		t.Errorf("list requests %q: want the defaults status=open and limit=20", got)
	}

	// Another conversation sees none of it.
	text, _ = call(t, cs, scoped("conv2", "t_9", "toolu_9"), "list_issues", map[string]any{"status": "all"})
	if !strings.Contains(text, "This conversation has no issues.") {
		t.Errorf("list_issues of another conversation: %s", text)
	}
	text, res = call(t, cs, scoped("conv2", "t_9", "toolu_10"), "comment_issue", map[string]any{"issue_id": "iss_1", "body": "mine now"})
	if !res.IsError || !strings.Contains(text, "no issue iss_1 in conversation conv2") {
		t.Errorf("comment_issue on another conversation's issue: error %v, %s", res.IsError, text)
	}
}

// refuseAll is a control-plane that answers every request with the error
// status, code and message.
func refuseAll(status int, code, msg string) func(w http.ResponseWriter, r *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		httpapi.WriteError(w, status, code, msg)
		return true
	}
}

func TestServerRefusals(t *testing.T) {
	valid := map[string]any{"title": "t", "body": "b"}
	tests := map[string]struct {
		meta     mcp.Meta
		tool     string
		args     any
		fail     func(w http.ResponseWriter, r *http.Request) bool
		wantText string
		// wantRequests is the number of requests the control-plane gets.
		wantRequests int
	}{
		"no conversation":  {meta: nil, tool: "report_issue", args: valid, wantText: "names no TalkIDE conversation"},
		"bad conversation": {meta: scoped("../x", "t", "u"), tool: "report_issue", args: valid, wantText: "names no TalkIDE conversation"},
		"no title":         {tool: "report_issue", args: map[string]any{"body": "b"}, wantText: "title"},
		"unknown severity": {tool: "report_issue", args: map[string]any{"title": "t", "body": "b", "severity": "urgent"}, wantText: "severity"},
		"title too long":   {tool: "report_issue", args: map[string]any{"title": strings.Repeat("x", 201), "body": "b"}, wantText: "title"},
		"11 labels":        {tool: "report_issue", args: map[string]any{"title": "t", "body": "b", "labels": strings.Split("a b c d e f g h i j k", " ")}, wantText: "labels"},
		"unknown property": {tool: "report_issue", args: map[string]any{"title": "t", "body": "b", "priority": 1}, wantText: "priority"},
		"bad issue id":     {tool: "comment_issue", args: map[string]any{"issue_id": "a/b", "body": "b"}, wantText: "issue_id"},
		"limit above 100":  {tool: "list_issues", args: map[string]any{"limit": 101}, wantText: "limit"},
		"unknown status":   {tool: "comment_issue", args: map[string]any{"issue_id": "iss_1", "body": "b", "status": "done"}, wantText: "status"},
		"refused by the server": {
			tool: "report_issue", args: valid,
			fail:     refuseAll(http.StatusBadRequest, contract.CodeBadRequest, "body is 30000 bytes, more than the 20480 allowed"),
			wantText: "the control-plane refused: body is 30000 bytes", wantRequests: 1,
		},
		"down": {
			tool: "report_issue", args: valid,
			fail:     refuseAll(http.StatusServiceUnavailable, contract.CodeUnavailable, "internal detail"),
			wantText: "could not be reached; nothing was changed", wantRequests: 3,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			f := startFakeCP(t)
			f.setFail(tt.fail)
			cs := connect(t, f)
			meta := tt.meta
			if meta == nil && name != "no conversation" {
				meta = scoped("conv1", "t_1", "toolu_1")
			}
			text, res := call(t, cs, meta, tt.tool, tt.args)
			if !res.IsError || !strings.Contains(text, tt.wantText) {
				t.Errorf("error %v, text %q; want an error saying %q", res.IsError, text, tt.wantText)
			}
			if strings.Contains(text, "internal detail") {
				t.Errorf("the control-plane's 5xx message reached the model: %q", text)
			}
			if n := len(f.Requests()); n != tt.wantRequests {
				t.Errorf("the control-plane got %d requests, want %d", n, tt.wantRequests)
			}
		})
	}
}

// TestServerRetries: a call the control-plane fails twice succeeds on the
// third try, every try with the same idempotency key.
func TestServerRetries(t *testing.T) {
	f := startFakeCP(t)
	tries := 0
	f.setFail(func(w http.ResponseWriter, r *http.Request) bool {
		tries++
		if tries <= 2 {
			httpapi.WriteError(w, http.StatusBadGateway, contract.CodeUnavailable, "try again")
			return true
		}
		return false
	})
	cs := connect(t, f)
	text, res := call(t, cs, scoped("conv1", "t_1", "toolu_1"), "report_issue", map[string]any{"title": "t", "body": "b"})
	if res.IsError || !strings.Contains(text, "Filed issue iss_1") {
		t.Fatalf("error %v, text %s", res.IsError, text)
	}
	if n := len(f.Requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}
