package issuetracking

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/contract"
)

const listIssuesDescription = `List the issues of this conversation, newest first, with their comments. By default the open ones, at most 20; status "closed" or "all" and a limit up to 100 change that. Long bodies and comments are shortened in the list.`

// DefaultListLimit is how many issues list_issues shows when the model
// names no limit.
const DefaultListLimit = 20

// listIssuesInput is list_issues' input.
type listIssuesInput struct {
	Status string `json:"status"`
	Limit  int    `json:"limit"`
}

func listIssuesTool() *mcp.Tool {
	return &mcp.Tool{
		Name:        "list_issues",
		Title:       "List issues",
		Description: listIssuesDescription,
		InputSchema: inputSchema(map[string]any{
			"status": map[string]any{"type": "string", "enum": []string{contract.IssueOpen, contract.IssueClosed, contract.IssueStatusAll},
				"default": contract.IssueOpen, "description": "Which issues: open (the default), closed or all."},
			"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": contract.MaxIssueList, "default": DefaultListLimit,
				"description": "At most this many issues, newest first; default 20."},
		}),
		Annotations: &mcp.ToolAnnotations{Title: "List issues", ReadOnlyHint: true, OpenWorldHint: new(false)},
	}
}

func (h *handlers) listIssues(ctx context.Context, req *mcp.CallToolRequest, in listIssuesInput) (*mcp.CallToolResult, any, error) {
	sc, err := scopeOf(req)
	if err != nil {
		return nil, nil, err
	}
	issues, err := h.cp.ListIssues(ctx, sc.conversation, in.Status, in.Limit)
	if err != nil {
		return nil, nil, h.failure(ctx, sc, "list_issues", err)
	}
	if issues == nil {
		issues = []contract.Issue{}
	}
	return textResult(renderList(in.Status, in.Limit, issues)), contract.IssueList{Issues: issues}, nil
}

// Shortening in lists: the model can ask for one issue's whole text by
// listing fewer, and the user sees everything in TalkIDE.
const (
	listBodyBytes    = 2000
	listCommentBytes = 1000
)

func renderList(status string, limit int, issues []contract.Issue) string {
	which := status + " "
	if status == contract.IssueStatusAll || status == "" {
		which = ""
	}
	if len(issues) == 0 {
		return fmt.Sprintf("This conversation has no %sissues.", which)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %sissue%s in this conversation, newest first", len(issues), which, map[bool]string{true: "", false: "s"}[len(issues) == 1])
	if len(issues) == limit {
		fmt.Fprintf(&b, " (the limit of %d reached; there may be more)", limit)
	}
	b.WriteString(":\n")
	for _, i := range issues {
		b.WriteString("\n")
		b.WriteString(renderIssue(i, listBodyBytes))
	}
	return b.String()
}

// renderIssue shows an issue as text; max > 0 shortens its body to about
// max bytes and each comment to half as much.
func renderIssue(i contract.Issue, max int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s: %s\n", i.ID, i.Title)
	fmt.Fprintf(&b, "status: %s · severity: %s", i.Status, i.Severity)
	if len(i.Labels) > 0 {
		fmt.Fprintf(&b, " · labels: %s", strings.Join(i.Labels, ", "))
	}
	fmt.Fprintf(&b, " · filed %s\n\n", i.CreatedAt.UTC().Format("2006-01-02 15:04 UTC"))
	b.WriteString(shorten(i.Body, max))
	b.WriteString("\n")
	if len(i.Comments) > 0 {
		fmt.Fprintf(&b, "\nComments (%d):\n", len(i.Comments))
		for _, c := range i.Comments {
			fmt.Fprintf(&b, "- %s", c.CreatedAt.UTC().Format("2006-01-02 15:04 UTC"))
			if c.Status != "" {
				fmt.Fprintf(&b, " (set status %s)", c.Status)
			}
			b.WriteString(": ")
			b.WriteString(strings.ReplaceAll(shorten(c.Body, max/2), "\n", "\n  "))
			b.WriteString("\n")
		}
	}
	return b.String()
}

// shorten cuts s to about max bytes on a UTF-8 boundary, saying how much
// was left out; max <= 0 keeps s whole.
func shorten(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… [%d more bytes]", len(s)-cut)
}
