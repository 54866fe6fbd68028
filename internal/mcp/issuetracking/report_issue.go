package issuetracking

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/contract"
)

const reportIssueDescription = `File an issue in this conversation's issue list, which the user sees in TalkIDE. Use it for a problem you found but cannot or should not fix now: a bug, a flaky test, a missing dependency or credential, a risk. Check list_issues first and comment on an existing issue rather than filing a duplicate.

The title is one line (at most 200 characters); the body (at most 20 KiB) says what happens, how to reproduce it and what you already know. Severity is low, medium (the default), high or critical. Labels (at most 10, each at most 50 characters) group issues, e.g. "ci", "security".

Answers with the new issue's id, which comment_issue takes.`

// reportIssueInput is report_issue's input.
type reportIssueInput struct {
	Title    string   `json:"title"`
	Body     string   `json:"body"`
	Severity string   `json:"severity"`
	Labels   []string `json:"labels,omitempty"`
}

// inputSchema is a tool's input: an object of these properties and no
// others, of which required must be given.
func inputSchema(properties map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": properties, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// recordsInTracker annotates a tool that records something in the issue
// tracker and nowhere else: a repeated call (same idempotency key) records
// nothing more, and nothing is deleted.
func recordsInTracker(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, IdempotentHint: true, DestructiveHint: new(false), OpenWorldHint: new(false)}
}

func reportIssueTool() *mcp.Tool {
	return &mcp.Tool{
		Name:        "report_issue",
		Title:       "Report an issue",
		Description: reportIssueDescription,
		InputSchema: inputSchema(map[string]any{
			"title": map[string]any{"type": "string", "minLength": 1, "maxLength": contract.MaxIssueTitle,
				"description": "One line that names the problem."},
			"body": map[string]any{"type": "string", "minLength": 1,
				"description": "What happens, how to reproduce it, what you already know. Markdown. At most 20 KiB."},
			"severity": map[string]any{"type": "string", "enum": contract.Severities, "default": contract.SeverityMedium,
				"description": "How bad it is: low, medium, high or critical."},
			"labels": map[string]any{"type": "array", "maxItems": contract.MaxIssueLabels,
				"items":       map[string]any{"type": "string", "minLength": 1, "maxLength": contract.MaxIssueLabel},
				"description": "Short tags, e.g. \"ci\", \"security\"."},
		}, "title", "body"),
		Annotations: recordsInTracker("Report an issue"),
	}
}

func (h *handlers) reportIssue(ctx context.Context, req *mcp.CallToolRequest, in reportIssueInput) (*mcp.CallToolResult, any, error) {
	sc, err := scopeOf(req)
	if err != nil {
		return nil, nil, err
	}
	issue, created, err := h.cp.CreateIssue(ctx, contract.CreateIssueRequest{
		IdempotencyKey: sc.key("issue"), ConversationID: sc.conversation, TurnID: sc.turn,
		Title: in.Title, Body: in.Body, Severity: in.Severity, Labels: in.Labels,
	})
	if err != nil {
		return nil, nil, h.failure(ctx, sc, "report_issue", err)
	}
	if created {
		sc.logger(h.log).Info("issue filed", "issue", issue.ID, "severity", issue.Severity)
	}
	text := "Filed issue " + issue.ID + ".\n\n" + renderIssue(issue, 0)
	if !created {
		text = "This call had already filed issue " + issue.ID + "; nothing new was filed.\n\n" + renderIssue(issue, 0)
	}
	return textResult(text), issue, nil
}
