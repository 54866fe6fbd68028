package issuetracking

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/trust"
)

// MaxResponse bounds what the client reads of one answer. A listing of
// many issues with long comment threads can exceed it; the tool then says
// so and the model asks for fewer.
const MaxResponse = 8 << 20

// Client calls the control-plane's issue endpoints for one tenant-env,
// every request signed like the worker's reports (trust.ToControlPlane).
// A call that fails on the way (network, 429, 5xx) is retried with the same
// idempotency key, so a lost answer never files twice. It is safe for
// concurrent use.
type Client struct {
	base     string
	signer   *trust.Signer
	hc       *http.Client
	attempts int
	backoff  time.Duration
}

// ClientOptions configure a Client; nil or zero fields are the defaults.
type ClientOptions struct {
	HTTPClient *http.Client // default: a client with a 10 s timeout
	// Attempts bounds the tries of one call; default 3.
	Attempts int
	// Backoff is the pause before the first retry (with jitter), doubled
	// for each next one; default 200 ms.
	Backoff time.Duration
}

// NewClient returns a client of the control-plane at baseURL. signer must
// sign in the direction trust.ToControlPlane with the tenant-env's key.
func NewClient(baseURL string, signer *trust.Signer, opts *ClientOptions) *Client {
	if signer == nil || signer.Direction != trust.ToControlPlane {
		panic("issuetracking: NewClient needs a signer in the direction worker → control-plane")
	}
	o := defaults.Copy(opts)
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	defaults.IfNotPositive(&o.Attempts, 3)
	defaults.IfNotPositive(&o.Backoff, 200*time.Millisecond)
	return &Client{base: strings.TrimRight(baseURL, "/"), signer: signer, hc: o.HTTPClient, attempts: o.Attempts, backoff: o.Backoff}
}

// APIError is the control-plane's refusal of a request. Code and Message
// are the contract's error body: they say what is wrong without secrets
// and may be shown to the model.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("control-plane answered %d %s: %s", e.Status, e.Code, e.Message)
}

// CreateIssue files an issue; created is false when the control-plane had
// filed one with the same idempotency key before.
func (c *Client) CreateIssue(ctx context.Context, req contract.CreateIssueRequest) (issue contract.Issue, created bool, err error) {
	status, err := c.do(ctx, http.MethodPost, contract.IssuesPath, req, &issue)
	return issue, status == http.StatusCreated, err
}

// ListIssues lists a conversation's issues, newest first. status is
// contract.IssueOpen, IssueClosed or IssueStatusAll; limit <= 0 is the
// control-plane's default.
func (c *Client) ListIssues(ctx context.Context, conversationID, status string, limit int) ([]contract.Issue, error) {
	q := url.Values{"conversation_id": {conversationID}}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var list contract.IssueList
	_, err := c.do(ctx, http.MethodGet, contract.IssuesPath+"?"+q.Encode(), nil, &list)
	return list.Issues, err
}

// CommentIssue comments on an issue; created is false when the
// control-plane had stored a comment with the same idempotency key before.
func (c *Client) CommentIssue(ctx context.Context, issueID string, req contract.CommentIssueRequest) (comment contract.IssueComment, created bool, err error) {
	if err := contract.ValidateID("issue id", issueID); err != nil {
		return comment, false, err
	}
	path := strings.Replace(contract.IssueCommentsPath, "{id}", issueID, 1)
	status, err := c.do(ctx, http.MethodPost, path, req, &comment)
	return comment, status == http.StatusCreated, err
}

// do sends one request, retrying what may succeed on another try, and
// decodes a 2xx answer into out. It returns the final status.
func (c *Client) do(ctx context.Context, method, pathAndQuery string, in, out any) (int, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, err
		}
	}
	retry := backoff.New(backoff.Policy{Base: c.backoff, Max: 8 * c.backoff})
	for attempt := 1; ; attempt++ {
		status, err := c.once(ctx, method, pathAndQuery, body, out)
		if err == nil || !retryable(status, err) || attempt == c.attempts || ctx.Err() != nil {
			if ctx.Err() != nil {
				return status, ctx.Err()
			}
			return status, err
		}
		if err := retry.Wait(ctx); err != nil {
			return status, err
		}
	}
}

// retryable tells whether another try may succeed: the request did not
// reach the control-plane or its answer was lost, or it answered 429 or 5xx.
func retryable(status int, err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return status == 0
	}
	return ae.Status == http.StatusTooManyRequests || ae.Status >= 500
}

func (c *Client) once(ctx context.Context, method, pathAndQuery string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+pathAndQuery, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.signer.Sign(req, body)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	if err != nil {
		return 0, err
	}
	if len(data) > MaxResponse {
		return resp.StatusCode, &APIError{Status: resp.StatusCode, Code: "response_too_large",
			Message: fmt.Sprintf("the answer is larger than %d bytes", MaxResponse)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e contract.Error
		if json.Unmarshal(data, &e) != nil || e.Error.Message == "" {
			e.Error.Code, e.Error.Message = "unavailable", http.StatusText(resp.StatusCode)
		}
		return resp.StatusCode, &APIError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.StatusCode, fmt.Errorf("control-plane answer: %w", err)
	}
	return resp.StatusCode, nil
}
