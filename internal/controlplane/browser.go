package controlplane

import (
	"errors"
	"mime"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/store"
)

// maxBrowserBody bounds a browser API request body.
const maxBrowserBody = 1 << 20

// browser resolves the caller before h runs: talkide dev's local user, or
// whoever the authenticator finds (a session, an API token, a trusted
// proxy's header).
func (s *Server) browser(h httpapi.HandlerFunc) httpapi.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		// What the API answers is one user's and for scripts, never for a
		// frame, a shared cache or another site's Referer.
		hdr := w.Header()
		hdr.Set("Cache-Control", "no-store")
		hdr.Set("Referrer-Policy", "no-referrer")
		hdr.Set("X-Frame-Options", "DENY")
		var caller *auth.Caller
		switch {
		case s.cfg.LocalUser != "":
			if err := httpapi.LocalOnly(r); err != nil {
				return err
			}
			caller = &auth.Caller{UserID: s.cfg.LocalUser, Via: auth.ViaLocal}
		case s.cfg.Auth == nil:
			return httpapi.Errorf(http.StatusUnauthorized, contract.CodeUnauthorized,
				"browser authentication is not configured on this control-plane; run it with a local user (talkide dev) or an authentication mode (docs/accounts.md)")
		default:
			if err := jsonBody(r); err != nil {
				return err
			}
			var err error
			if caller, err = s.cfg.Auth.Authenticate(r); err != nil {
				return err
			}
		}
		if id := r.PathValue("id"); r.Pattern != "" && strings.Contains(r.Pattern, "{id}") {
			if err := httpapi.ID("conversation id", id); err != nil {
				return err
			}
		}
		return h(w, r.WithContext(auth.WithCaller(r.Context(), caller)))
	}
}

// jsonBody refuses a POST or PATCH body that is not JSON: a form or
// text/plain body is what a cross-site page can send without a preflight
// (a PATCH always needs one, but the rule is kept for every body).
func jsonBody(r *http.Request) error {
	if (r.Method != http.MethodPost && r.Method != http.MethodPatch) || r.ContentLength == 0 {
		return nil
	}
	if r.Pattern == attachPattern {
		return octetBody(r)
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return httpapi.Errorf(http.StatusUnsupportedMediaType, contract.CodeBadRequest, "the request body must be sent as Content-Type: application/json")
	}
	return nil
}

// MeView is GET /api/me: who the caller is and how they proved it (the UI
// offers a logout to a session's user only).
type MeView struct {
	User        string           `json:"user"`
	Via         string           `json:"via"`
	Memberships []MembershipView `json:"memberships"`
}

// MembershipView is a membership as the browser API and the operator API
// show it.
type MembershipView struct {
	User      string    `json:"user"`
	Tenant    string    `json:"tenant"`
	Env       string    `json:"env,omitempty"` // "": every env of the tenant
	Role      string    `json:"role"`
	Source    string    `json:"source"` // admin, or claim: the login's tenants claim manages it
	CreatedAt time.Time `json:"created_at"`
}

func membershipView(m store.Membership) MembershipView {
	v := MembershipView{User: m.UserID, Tenant: m.Tenant, Env: m.Env, Role: string(m.Role), Source: "admin", CreatedAt: m.CreatedAt}
	if m.FromClaim {
		v.Source = "claim"
	}
	return v
}

func (s *Server) handleMe(w http.ResponseWriter, r *http.Request) error {
	c := auth.CallerOf(r)
	out := MeView{User: c.UserID, Via: c.Via, Memberships: []MembershipView{}}
	for _, m := range c.Memberships {
		out.Memberships = append(out.Memberships, membershipView(m))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// userOf is the calling user's id.
func userOf(r *http.Request) string { return auth.CallerOf(r).UserID }

// ConversationView is the browser API's view of a conversation.
type ConversationView struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Tenant string `json:"tenant,omitempty"`
	Env    string `json:"env,omitempty"`
	// User owns the conversation: the caller, unless a tenant-admin lists
	// the tenant's.
	User      string    `json:"user,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// LastActivityAt is when a message was last sent or a turn last ended
	// in it; the list is ordered by it, the most recent first.
	LastActivityAt time.Time `json:"last_activity_at"`
	// ArchivedAt is when the owner archived it; absent while it is not.
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
	// Status is "running" while a turn runs and "idle" otherwise, in the
	// list as this replica knows it (activity.go); RunningTurnID names the
	// running turn. State, when present, is the worker's own answer.
	Status        string                 `json:"status,omitempty"`
	RunningTurnID string                 `json:"running_turn_id,omitempty"`
	State         *contract.SessionState `json:"state,omitempty"`
	// WorkerError says why State is missing.
	WorkerError string `json:"worker_error,omitempty"`
}

// UpdateConversationRequest is the body of PATCH /api/conversations/{id}:
// a new title, archived true or false, or both.
type UpdateConversationRequest struct {
	Title    *string `json:"title,omitempty"`
	Archived *bool   `json:"archived,omitempty"`
}

// CreateConversationRequest is the body of POST /api/conversations; every
// field is optional. With an id the call is idempotent. Tenant and Env
// choose among the caller's tenant-envs; without them the control-plane's
// default is used when the caller belongs to it, else the caller's only
// one.
type CreateConversationRequest struct {
	ID     string `json:"id,omitempty"`
	Title  string `json:"title,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	Env    string `json:"env,omitempty"`
}

// SendRequest is the body of POST /api/conversations/{id}/messages.
type SendRequest struct {
	Text            string `json:"text"`
	ClientMessageID string `json:"client_message_id,omitempty"`
	// Attachments are the paths POST …/attachments answered.
	Attachments []string `json:"attachments,omitempty"`
}

// conversationWorker loads a conversation the calling user owns and the
// client of the worker that serves it.
func (s *Server) conversationWorker(r *http.Request) (store.Conversation, *workerClient, error) {
	c, err := s.conversation(r)
	if err != nil {
		return c, nil, err
	}
	wc, err := s.workerFor(r.Context(), c.Tenant, c.Env)
	return c, wc, err
}

// conversation loads a conversation the caller may see (auth.Caller.CanSee);
// one they may not is as unknown as a missing one.
func (s *Server) conversation(r *http.Request) (store.Conversation, error) {
	id := r.PathValue("id")
	c, err := s.cfg.Store.GetConversation(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !auth.CallerOf(r).CanSee(c)) {
		return c, httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no conversation %s", id)
	}
	return c, err
}

// readJSON decodes the body of r, at most max bytes, into v.
func readJSON(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	body, err := httpapi.ReadBody(w, r, max)
	if err != nil {
		return err
	}
	return httpapi.DecodeJSON(body, v)
}

// readOptionalJSON is readJSON for a body that may be empty, which leaves
// v as it is.
func readOptionalJSON(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	body, err := httpapi.ReadBody(w, r, max)
	if err != nil || len(body) == 0 {
		return err
	}
	return httpapi.DecodeJSON(body, v)
}

func (s *Server) handleCreateConversation(w http.ResponseWriter, r *http.Request) error {
	var req CreateConversationRequest
	err := readOptionalJSON(w, r, maxBrowserBody, &req)
	if err != nil {
		return err
	}
	if req.ID == "" {
		req.ID = contract.NewID("c_")
	} else if err := httpapi.ID("conversation id", req.ID); err != nil {
		return err
	}
	if req.Title != "" {
		if req.Title, err = contract.ValidateLine("title", req.Title, contract.MaxConversationTitle); err != nil {
			return err
		}
	}
	caller := auth.CallerOf(r)
	user := caller.UserID
	te, err := s.chooseEnv(r, caller, req.Tenant, req.Env)
	if err != nil {
		return err
	}
	if caller.Local() {
		// The local user exists once it creates a conversation; any other
		// was added by an administrator.
		if err := s.cfg.Store.PutUser(r.Context(), store.User{ID: user, Name: user, CreatedAt: s.cfg.Now().UTC()}); err != nil {
			return err
		}
	}
	c, created, err := s.cfg.Store.CreateConversation(r.Context(), store.Conversation{
		ID: req.ID, Tenant: te.Tenant, Env: te.Env, UserID: user, Title: req.Title, CreatedAt: s.cfg.Now().UTC(),
	})
	if errors.Is(err, store.ErrConflict) {
		return httpapi.Errorf(http.StatusConflict, contract.CodeConflict, "conversation id %s is taken", req.ID)
	}
	if err != nil {
		return err
	}
	wc, err := s.workerFor(r.Context(), c.Tenant, c.Env)
	if err != nil {
		return err
	}
	view := viewOf(c)
	var st contract.SessionState
	if _, err := wc.do(r.Context(), http.MethodPost, contract.SessionsPath, "", contract.CreateSessionRequest{ConversationID: c.ID, UserID: user}, &st); err != nil {
		// The conversation is stored; creating it again with its id retries
		// the worker side.
		return workerFailure(err)
	}
	view.State = &st
	s.activity.state(st)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.log.Info("conversation created", "conversation", c.ID, "tenant", c.Tenant, "env", c.Env, "user", user)
	}
	httpapi.WriteJSON(w, status, view)
	return nil
}

// handleListConversations lists what the caller may see, the most recently
// active first,
// each with whether a turn runs in it; archived conversations only with
// ?archived=1.
func (s *Server) handleListConversations(w http.ResponseWriter, r *http.Request) error {
	archived, err := archivedQuery(r)
	if err != nil {
		return err
	}
	all, err := s.visibleConversations(r)
	if err != nil {
		return err
	}
	cs := all[:0:0]
	for _, c := range all {
		if archived || c.ArchivedAt.IsZero() {
			cs = append(cs, c)
		}
	}
	out := views(cs, viewOf)
	s.conversationStatus(r.Context(), cs, out)
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"conversations": out})
	return nil
}

// archivedQuery reads the list's one parameter, ?archived=0|1 (absent:
// 0); any other parameter is refused, as a misspelt field is in a body.
func archivedQuery(r *http.Request) (bool, error) {
	q := r.URL.Query()
	for k, vs := range q {
		if k != "archived" {
			return false, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "unknown query parameter %q (want archived)", k)
		}
		if len(vs) > 1 {
			return false, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "query parameter %q is given %d times", k, len(vs))
		}
	}
	switch v := q.Get("archived"); {
	case !q.Has("archived") || v == "0":
		return false, nil
	case v == "1":
		return true, nil
	}
	return false, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "archived must be 0 or 1")
}

// handleUpdateConversation renames, archives or unarchives a conversation
// of the caller's. One they may not see is a 404 as everywhere; one they
// see but do not own (a tenant-admin's view) is theirs to read, not to
// change: 403, as for sending.
func (s *Server) handleUpdateConversation(w http.ResponseWriter, r *http.Request) error {
	var req UpdateConversationRequest
	if err := readJSON(w, r, maxBrowserBody, &req); err != nil {
		return err
	}
	if req.Title == nil && req.Archived == nil {
		return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "nothing to change: give title, archived, or both")
	}
	if req.Title != nil {
		t, err := contract.ValidateLine("title", *req.Title, contract.MaxConversationTitle)
		if err != nil {
			return err
		}
		req.Title = &t
	}
	c, err := s.conversation(r)
	if err != nil {
		return err
	}
	if !auth.CallerOf(r).CanSend(c) {
		return httpapi.Errorf(http.StatusForbidden, contract.CodeForbidden, "only the conversation's owner renames or archives it")
	}
	c, err = s.cfg.Store.UpdateConversation(r.Context(), c.ID, store.ConversationChange{Title: req.Title, Archived: req.Archived, At: s.cfg.Now().UTC()})
	if errors.Is(err, store.ErrNotFound) {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no conversation %s", c.ID)
	}
	if err != nil {
		return err
	}
	s.log.Info("conversation updated", "conversation", c.ID, "user", userOf(r), "renamed", req.Title != nil, "archived", !c.ArchivedAt.IsZero())
	httpapi.WriteJSON(w, http.StatusOK, viewOf(c))
	return nil
}

func (s *Server) handleGetConversation(w http.ResponseWriter, r *http.Request) error {
	c, err := s.conversation(r)
	if err != nil {
		return err
	}
	view := viewOf(c)
	wc, err := s.workerFor(r.Context(), c.Tenant, c.Env)
	if err != nil {
		return err
	}
	if st, err := s.sessionState(r.Context(), wc, c.ID); err != nil {
		view.WorkerError = workerFailure(err).(*httpapi.Error).Msg
	} else {
		view.State = &st
	}
	httpapi.WriteJSON(w, http.StatusOK, view)
	return nil
}

func (s *Server) handleSend(w http.ResponseWriter, r *http.Request) (err error) {
	// A browser's traceparent is not ours to continue: the turn's trace
	// starts here, linked to the caller's span when it sent one.
	var opts []trace.SpanStartOption
	if s.tracer != nil {
		opts = append(observe.Untrusted(r.Header), trace.WithSpanKind(trace.SpanKindServer))
	}
	ctx, span := observe.Start(r.Context(), s.tracer, "POST /api/conversations/{id}/messages", opts...)
	defer func() { observe.End(span, err, errorCode(err)) }()
	r = r.WithContext(ctx)
	var req SendRequest
	if err := readJSON(w, r, maxBrowserBody, &req); err != nil {
		return err
	}
	// The client may leave the id to us; the worker may not, because its
	// idempotency keys on it.
	if req.ClientMessageID == "" {
		req.ClientMessageID = contract.NewID("m_")
	}
	msg := contract.SendMessageRequest{ClientMessageID: req.ClientMessageID, Text: req.Text, Attachments: req.Attachments}
	if err := msg.Validate(); err != nil {
		return err
	}
	c, wc, err := s.conversationWorker(r)
	if err != nil {
		return err
	}
	if !auth.CallerOf(r).CanSend(c) {
		return httpapi.Errorf(http.StatusForbidden, contract.CodeForbidden, "only the conversation's owner sends messages in it")
	}
	span.SetAttributes(observe.Tenant.String(c.Tenant), observe.Env.String(c.Env), observe.Conversation.String(c.ID))
	var resp contract.SendMessageResponse
	status, err := wc.do(r.Context(), http.MethodPost, contract.MessagesPath, c.ID,
		msg, &resp)
	if err != nil {
		return workerFailure(err)
	}
	span.SetAttributes(observe.Turn.String(resp.TurnID))
	if !resp.Duplicate {
		s.activity.learn(c.ID, resp.Seq, true, resp.TurnID)
		s.messageSent(r.Context(), c, msg)
	}
	httpapi.WriteJSON(w, status, resp)
	return nil
}

func (s *Server) handleInterrupt(w http.ResponseWriter, r *http.Request) error {
	c, wc, err := s.conversationWorker(r)
	if err != nil {
		return err
	}
	var resp contract.InterruptResponse
	if _, err := wc.do(r.Context(), http.MethodPost, contract.InterruptPath, c.ID, nil, &resp); err != nil {
		return workerFailure(err)
	}
	httpapi.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// errorCode is the contract code of a handler's error, for a span: what
// kind of failure, never its message.
func errorCode(err error) string {
	if he, ok := errors.AsType[*httpapi.Error](err); ok {
		return he.Code
	}
	if fe, ok := errors.AsType[*contract.FieldError](err); ok {
		return fe.Code
	}
	return ""
}

// workerFailure turns a worker call's error into what the browser sees.
func workerFailure(err error) error {
	var he *httpapi.Error
	if errors.As(err, &he) {
		return he
	}
	return &httpapi.Error{Status: http.StatusBadGateway, Code: contract.CodeUnavailable,
		Msg: "the conversation's worker is unreachable; try again shortly", Err: err}
}
