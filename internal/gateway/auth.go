package gateway

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// authorize checks the request's WorkerToken and conversation and returns
// the conversation the call is for. On failure the conversation, when one is
// returned, holds what is known of the caller, for the log.
func (g *Gateway) authorize(r *http.Request) (*store.Conversation, *httpError) {
	token := workerToken(r.Header)
	if token == "" {
		return nil, &httpError{Status: http.StatusUnauthorized, Type: errAuthentication,
			Msg: "missing worker token: send " + TokenHeader + " or Authorization: Bearer"}
	}
	claims, err := g.tokens.verify(g.keys, token, g.now())
	if err != nil {
		msg := "invalid worker token"
		if errors.Is(err, trust.ErrExpired) {
			msg = "worker token expired"
		}
		// err comes from trust, whose errors never hold the token.
		return nil, &httpError{Status: http.StatusUnauthorized, Type: errAuthentication, Msg: msg, Err: err}
	}
	who := &store.Conversation{ID: claims.ConversationID, Tenant: claims.Tenant, Env: claims.Env}
	forbidden := func(cause error) *httpError {
		return &httpError{Status: http.StatusForbidden, Type: errPermission,
			Msg: "worker token not valid for this conversation", Err: cause}
	}

	id := claims.ConversationID
	if vs, ok := r.Header[http.CanonicalHeaderKey(ConversationHeader)]; ok {
		if len(vs) != 1 {
			return who, &httpError{Status: http.StatusBadRequest, Type: errInvalidRequest,
				Msg: "exactly one " + ConversationHeader + " header is allowed"}
		}
		if err := contract.ValidateConversationID(vs[0]); err != nil {
			return who, &httpError{Status: http.StatusBadRequest, Type: errInvalidRequest,
				Msg: ConversationHeader + ": " + err.Error(), Err: err}
		}
		if vs[0] != claims.ConversationID {
			return who, forbidden(errors.New("conversation header differs from token"))
		}
		id = vs[0]
	}
	if err := contract.ValidateConversationID(id); err != nil {
		return who, forbidden(err)
	}

	conv, err := g.conversation(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Not 404: whether a conversation exists is not the caller's business.
		return who, forbidden(err)
	case err != nil:
		return who, &httpError{Status: http.StatusInternalServerError, Type: errAPI,
			Msg: "internal error", Err: err}
	case conv.Tenant != claims.Tenant || conv.Env != claims.Env:
		return who, forbidden(trust.ErrScope)
	}
	return &conv, nil
}

// workerToken returns the WorkerToken of a request: X-Worker-Token, or the
// credential of "Authorization: Bearer". It returns "" when there is none.
func workerToken(h http.Header) string {
	if t := h.Get(TokenHeader); t != "" {
		return t
	}
	scheme, cred, ok := strings.Cut(h.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(cred)
}

// deny answers a request refused before it was authorised and logs it,
// with whatever is known of the caller. who, when not nil, holds what a
// verified token claims, which goes to the log but never into a metrics
// label: only a conversation from the store names a provisioned
// tenant-env, and a token that is signed but refused (another tenant's
// conversation, one that does not exist) could otherwise make a series for
// any tenant it claims. It never logs a header value.
func (g *Gateway) deny(w http.ResponseWriter, r *http.Request, who *store.Conversation, e *httpError) {
	g.refuse(w, r, who, nil, "", e)
}

// denyCall answers an authorised call that is refused: conv is the
// conversation authorize resolved from the store, whose tenant-env labels
// the metrics.
func (g *Gateway) denyCall(w http.ResponseWriter, r *http.Request, conv *store.Conversation, model string, e *httpError) {
	g.refuse(w, r, conv, conv, model, e)
}

func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, who, conv *store.Conversation, model string, e *httpError) {
	attrs := []any{"status", e.Status, "method", r.Method, "path", r.URL.Path, "reason", e.Msg}
	if who != nil {
		attrs = append(attrs, "tenant", who.Tenant, "env", who.Env, "conversation", who.ID)
	}
	if conv != nil {
		g.observe(conv.Tenant, conv.Env, model, e.Status, false)
	} else {
		g.observe("", "", model, e.Status, false)
	}
	if e.Err != nil {
		attrs = append(attrs, "err", e.Err.Error())
	}
	level := slog.LevelInfo
	if e.Status >= 500 {
		level = slog.LevelError
	}
	g.log.Log(r.Context(), level, "gateway: denied", attrs...)
	writeErrorBody(w, e.Status, anthropicErrorBody{Type: e.Type, Message: e.Msg, Budget: e.Budget})
}
