package chatclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/talkide/platform/internal/contract"
)

// ListIssues returns the issues the agent filed in conversation id, newest
// first, each with its comments. status is contract.IssueOpen,
// contract.IssueClosed, or "" (or contract.IssueStatusAll) for both. An
// unknown id is an *APIError matching ErrNotFound.
func (c *Client) ListIssues(ctx context.Context, id, status string) ([]contract.Issue, error) {
	u, err := c.conversationURL(id, "/issues")
	if err != nil {
		return nil, err
	}
	switch status {
	case "", contract.IssueStatusAll, contract.IssueOpen, contract.IssueClosed:
	default:
		return nil, fmt.Errorf("chatclient: issue status %q is not %s, %s or %s", status, contract.IssueOpen, contract.IssueClosed, contract.IssueStatusAll)
	}
	if status != "" {
		u += "?status=" + url.QueryEscape(status)
	}
	var list contract.IssueList
	if _, err := c.doJSON(ctx, http.MethodGet, u, nil, &list); err != nil {
		return nil, err
	}
	return list.Issues, nil
}
