package issuetracking

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/contract"
)

const commentIssueDescription = `Comment on an issue of this conversation: new findings, progress, a workaround. Give status "closed" to close the issue with the comment (say why: fixed, duplicate, not a problem) or "open" to reopen it. The body is at most 20 KiB.`

// commentIssueInput is comment_issue's input.
type commentIssueInput struct {
	IssueID string `json:"issue_id"`
	Body    string `json:"body"`
	Status  string `json:"status,omitempty"`
}

func commentIssueTool() *mcp.Tool {
	return &mcp.Tool{
		Name:        "comment_issue",
		Title:       "Comment on an issue",
		Description: commentIssueDescription,
		InputSchema: inputSchema(map[string]any{
			"issue_id": map[string]any{"type": "string", "minLength": 1, "maxLength": contract.MaxIDLen,
				"description": "The issue's id, as report_issue or list_issues gave it (iss_…)."},
			"body": map[string]any{"type": "string", "minLength": 1, "description": "The comment. Markdown. At most 20 KiB."},
			"status": map[string]any{"type": "string", "enum": []string{contract.IssueOpen, contract.IssueClosed},
				"description": "Optional: closed to close the issue with this comment, open to reopen it."},
		}, "issue_id", "body"),
		Annotations: recordsInTracker("Comment on an issue"),
	}
}

func (h *handlers) commentIssue(ctx context.Context, req *mcp.CallToolRequest, in commentIssueInput) (*mcp.CallToolResult, any, error) {
	sc, err := scopeOf(req)
	if err != nil {
		return nil, nil, err
	}
	if err := contract.ValidateID("issue_id", in.IssueID); err != nil {
		return nil, nil, fmt.Errorf("comment_issue: %v", err)
	}
	c, created, err := h.cp.CommentIssue(ctx, in.IssueID, contract.CommentIssueRequest{
		IdempotencyKey: sc.key("comment"), ConversationID: sc.conversation, TurnID: sc.turn,
		Body: in.Body, Status: in.Status,
	})
	if err != nil {
		return nil, nil, h.failure(ctx, sc, "comment_issue", err)
	}
	if created {
		sc.logger(h.log).Info("issue commented", "issue", c.IssueID, "comment", c.ID, "status", c.Status)
	}
	text := "Commented on issue " + c.IssueID + " (comment " + c.ID + ")."
	switch {
	case !created:
		text = "This call had already commented on issue " + c.IssueID + " (comment " + c.ID + "); nothing new was added."
	case c.Status == contract.IssueClosed:
		text = "Commented on issue " + c.IssueID + " and closed it (comment " + c.ID + ")."
	case c.Status == contract.IssueOpen:
		text = "Commented on issue " + c.IssueID + " and reopened it (comment " + c.ID + ")."
	}
	return textResult(text), c, nil
}
