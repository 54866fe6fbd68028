package controlplane

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// Issues: the agent files them through the worker's
// talkide-issue-tracking MCP server, which calls the signed worker
// endpoints below; the browser lists a conversation's issues. An issue
// belongs to its conversation: the worker endpoints act only on
// conversations of the signer's tenant-env (403 otherwise) and on issues of
// the conversation the request names (404 otherwise), so one conversation's
// agent never sees another's issues.

// verifyWorker reads a signed worker request's body (at most max bytes) and
// checks its signature and that the signer's env exists: every failure is
// the same 401.
func (s *Server) verifyWorker(w http.ResponseWriter, r *http.Request, max int64) (trust.Principal, []byte, error) {
	body, err := httpapi.ReadBody(w, r, max)
	if err != nil {
		return trust.Principal{}, nil, err
	}
	p, err := s.reports.Verify(r, body)
	if err == nil {
		if _, err = s.cfg.Store.GetEnv(r.Context(), p.Tenant, p.Env); errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("env %s/%s does not exist", p.Tenant, p.Env)
		} else if err != nil {
			return trust.Principal{}, nil, err
		}
	}
	if err != nil {
		return trust.Principal{}, nil, &httpapi.Error{Status: http.StatusUnauthorized, Code: contract.CodeUnauthorized,
			Msg: "the request's X-Worker-Token signature is missing, invalid, expired or replayed", Err: err}
	}
	return p, body, nil
}

// verifyWorkerJSON is verifyWorker for a JSON body, which it decodes into v.
func (s *Server) verifyWorkerJSON(w http.ResponseWriter, r *http.Request, max int64, v any) (trust.Principal, error) {
	p, body, err := s.verifyWorker(w, r, max)
	if err != nil {
		return p, err
	}
	return p, httpapi.DecodeJSON(body, v)
}

// workerConversation loads a conversation a worker names: it must exist and
// belong to the signer's tenant-env, 403 otherwise.
func (s *Server) workerConversation(r *http.Request, p trust.Principal, id string) (store.Conversation, error) {
	if err := httpapi.ID("conversation_id", id); err != nil {
		return store.Conversation{}, err
	}
	c, err := s.cfg.Store.GetConversation(r.Context(), id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return c, err
	}
	if err != nil || c.Tenant != p.Tenant || c.Env != p.Env {
		return c, httpapi.Errorf(http.StatusForbidden, contract.CodeForbidden, "conversation %s does not belong to %s/%s", id, p.Tenant, p.Env)
	}
	return c, nil
}

// recordingConversation checks what a worker's request that records
// something carries besides the conversation (its idempotency key, the turn
// if it names one) and then loads the conversation (workerConversation).
func (s *Server) recordingConversation(r *http.Request, p trust.Principal, key, turn, conversation string) (store.Conversation, error) {
	if err := idempotencyKey(key); err != nil {
		return store.Conversation{}, err
	}
	if err := optionalID("turn_id", turn); err != nil {
		return store.Conversation{}, err
	}
	return s.workerConversation(r, p, conversation)
}

// idempotencyKey checks an idempotency key.
func idempotencyKey(key string) error {
	return contract.ValidateIdempotencyKey("idempotency_key", key)
}

// optionalID checks an id that may be left out.
func optionalID(kind, id string) error {
	if id == "" {
		return nil
	}
	return httpapi.ID(kind, id)
}

func badRequest(format string, args ...any) error {
	return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, format, args...)
}

// checkText checks an issue's or a comment's body.
func checkText(what, text string) error {
	switch {
	case strings.TrimSpace(text) == "":
		return badRequest("%s is empty", what)
	case len(text) > contract.MaxIssueBody:
		return badRequest("%s is %d bytes, more than the %d allowed", what, len(text), contract.MaxIssueBody)
	case !utf8.ValidString(text):
		return badRequest("%s is not valid UTF-8", what)
	}
	return nil
}

// checkIssue checks what a worker files and returns the labels trimmed, with
// repeats dropped.
func checkIssue(req *contract.CreateIssueRequest) ([]string, error) {
	title, err := contract.ValidateLine("title", req.Title, contract.MaxIssueTitle)
	if err != nil {
		return nil, err
	}
	req.Title = title
	if err := checkText("body", req.Body); err != nil {
		return nil, err
	}
	if !slices.Contains(contract.Severities, req.Severity) {
		return nil, badRequest("severity %q is not one of %s", req.Severity, strings.Join(contract.Severities, ", "))
	}
	if len(req.Labels) > contract.MaxIssueLabels {
		return nil, badRequest("%d labels, more than the %d allowed", len(req.Labels), contract.MaxIssueLabels)
	}
	labels := make([]string, 0, len(req.Labels))
	for i, l := range req.Labels {
		l, err := contract.ValidateLine(fmt.Sprintf("labels[%d]", i), l, contract.MaxIssueLabel)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(labels, l) {
			labels = append(labels, l)
		}
	}
	return labels, nil
}

// listQuery reads the status and limit of a list request.
func listQuery(q url.Values) (status string, limit int, err error) {
	switch status = q.Get("status"); status {
	case "", contract.IssueStatusAll:
		status = ""
	case contract.IssueOpen, contract.IssueClosed:
	default:
		return "", 0, badRequest("status must be %s, %s or %s", contract.IssueOpen, contract.IssueClosed, contract.IssueStatusAll)
	}
	limit = contract.DefaultIssueList
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > contract.MaxIssueList {
			return "", 0, badRequest("limit must be an integer from 1 to %d", contract.MaxIssueList)
		}
	}
	return status, limit, nil
}

// handleWorkerCreateIssue files an issue: 201 with the issue, or 200 with
// the issue a request with the same idempotency key filed before.
func (s *Server) handleWorkerCreateIssue(w http.ResponseWriter, r *http.Request) error {
	var req contract.CreateIssueRequest
	p, err := s.verifyWorkerJSON(w, r, contract.MaxIssueRequest, &req)
	if err != nil {
		return err
	}
	c, err := s.recordingConversation(r, p, req.IdempotencyKey, req.TurnID, req.ConversationID)
	if err != nil {
		return err
	}
	labels, err := checkIssue(&req)
	if err != nil {
		return err
	}
	now := s.cfg.Now().UTC()
	stored, created, err := s.cfg.Store.CreateIssue(r.Context(), store.Issue{
		ID: contract.NewID("iss_"), Tenant: c.Tenant, Env: c.Env, ConversationID: c.ID, UserID: c.UserID, TurnID: req.TurnID,
		IdempotencyKey: req.IdempotencyKey, Title: req.Title, Body: req.Body, Severity: req.Severity, Labels: labels,
		Status: contract.IssueOpen, CreatedAt: now, UpdatedAt: now,
	})
	if errors.Is(err, store.ErrConflict) {
		return httpapi.Errorf(http.StatusConflict, contract.CodeConflict, "idempotency_key %q was used for an issue of another conversation", req.IdempotencyKey)
	}
	if err != nil {
		return err
	}
	if created {
		s.log.Info("issue filed", "tenant", c.Tenant, "env", c.Env, "conversation", c.ID, "turn", req.TurnID,
			"issue", stored.ID, "severity", stored.Severity)
	}
	httpapi.WriteCreated(w, created, issueView(stored))
	return nil
}

// handleWorkerListIssues lists a conversation's issues, newest first.
func (s *Server) handleWorkerListIssues(w http.ResponseWriter, r *http.Request) error {
	p, _, err := s.verifyWorker(w, r, 0)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	c, err := s.workerConversation(r, p, q.Get("conversation_id"))
	if err != nil {
		return err
	}
	return s.writeIssues(w, r, c.ID, q)
}

// handleWorkerCommentIssue comments on an issue of the conversation the
// request names: 201 with the comment, or 200 with the comment a request
// with the same idempotency key made before.
func (s *Server) handleWorkerCommentIssue(w http.ResponseWriter, r *http.Request) error {
	p, body, err := s.verifyWorker(w, r, contract.MaxIssueRequest)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := httpapi.ID("issue id", id); err != nil {
		return err
	}
	var req contract.CommentIssueRequest
	if err := httpapi.DecodeJSON(body, &req); err != nil {
		return err
	}
	c, err := s.recordingConversation(r, p, req.IdempotencyKey, req.TurnID, req.ConversationID)
	if err != nil {
		return err
	}
	if err := checkText("body", req.Body); err != nil {
		return err
	}
	if req.Status != "" && req.Status != contract.IssueOpen && req.Status != contract.IssueClosed {
		return badRequest("status must be %s or %s, or left out", contract.IssueOpen, contract.IssueClosed)
	}
	issue, err := s.cfg.Store.GetIssue(r.Context(), id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil || issue.ConversationID != c.ID || issue.Tenant != c.Tenant || issue.Env != c.Env {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no issue %s in conversation %s", id, c.ID)
	}
	if len(issue.Comments) >= contract.MaxIssueComments && !slices.ContainsFunc(issue.Comments, func(ic store.IssueComment) bool {
		return ic.IdempotencyKey == req.IdempotencyKey
	}) {
		return httpapi.Errorf(http.StatusConflict, contract.CodeConflict, "issue %s has %d comments, the most allowed", id, contract.MaxIssueComments)
	}
	stored, created, err := s.cfg.Store.AddIssueComment(r.Context(), store.IssueComment{
		ID: contract.NewID("cmt_"), IssueID: id, TurnID: req.TurnID, IdempotencyKey: req.IdempotencyKey,
		Body: req.Body, Status: req.Status, CreatedAt: s.cfg.Now().UTC(),
	})
	if err != nil {
		return err
	}
	if created {
		s.log.Info("issue commented", "tenant", c.Tenant, "env", c.Env, "conversation", c.ID, "turn", req.TurnID,
			"issue", id, "comment", stored.ID, "status", stored.Status)
	}
	httpapi.WriteCreated(w, created, commentView(stored))
	return nil
}

// handleListIssues is the browser's list of a conversation's issues with
// their comments, newest first.
func (s *Server) handleListIssues(w http.ResponseWriter, r *http.Request) error {
	c, err := s.conversation(r)
	if err != nil {
		return err
	}
	return s.writeIssues(w, r, c.ID, r.URL.Query())
}

func (s *Server) writeIssues(w http.ResponseWriter, r *http.Request, conversation string, q url.Values) error {
	status, limit, err := listQuery(q)
	if err != nil {
		return err
	}
	is, err := s.cfg.Store.ListIssues(r.Context(), conversation, status, limit)
	if err != nil {
		return err
	}
	out := contract.IssueList{Issues: make([]contract.Issue, 0, len(is))}
	for _, i := range is {
		out.Issues = append(out.Issues, issueView(i))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func issueView(i store.Issue) contract.Issue {
	v := contract.Issue{
		ID: i.ID, ConversationID: i.ConversationID, TurnID: i.TurnID, Title: i.Title, Body: i.Body,
		Severity: i.Severity, Labels: i.Labels, Status: i.Status, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt,
		Comments: make([]contract.IssueComment, 0, len(i.Comments)),
	}
	if v.Labels == nil {
		v.Labels = []string{}
	}
	for _, c := range i.Comments {
		v.Comments = append(v.Comments, commentView(c))
	}
	return v
}

func commentView(c store.IssueComment) contract.IssueComment {
	return contract.IssueComment{ID: c.ID, IssueID: c.IssueID, TurnID: c.TurnID, Body: c.Body, Status: c.Status, CreatedAt: c.CreatedAt}
}
