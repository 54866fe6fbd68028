package controlplane

import (
	"errors"
	"net/http"
	"strings"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// MintPath is the WorkerToken mint endpoint.
const MintPath = contract.MintPath

// authIdentity checks the identity token in Authorization and returns its
// tenant-env. Every failure is the same 401, so a caller learns nothing about
// which tokens exist.
func (s *Server) authIdentity(r *http.Request) (store.IdentityToken, error) {
	denied := func(err error) error {
		return &httpapi.Error{Status: http.StatusUnauthorized, Code: contract.CodeUnauthorized,
			Msg: "a valid identity token is required (Authorization: Bearer)", Err: err}
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return store.IdentityToken{}, denied(errors.New("no bearer token"))
	}
	rec, err := provision.Authenticate(r.Context(), s.cfg.Store, tok, s.cfg.Now())
	if errors.Is(err, provision.ErrInvalidToken) {
		return store.IdentityToken{}, denied(err)
	}
	return rec, err
}

func (s *Server) handleMint(w http.ResponseWriter, r *http.Request) error {
	body, err := httpapi.ReadBody(w, r, 4<<10)
	if err != nil {
		return err
	}
	ident, err := s.authIdentity(r)
	if err != nil {
		return err
	}
	var req contract.MintRequest
	if err := httpapi.DecodeJSON(body, &req); err != nil {
		return err
	}
	if err := httpapi.ID("conversation_id", req.ConversationID); err != nil {
		return err
	}
	c, err := s.cfg.Store.GetConversation(r.Context(), req.ConversationID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil || c.Tenant != ident.Tenant || c.Env != ident.Env {
		return httpapi.Errorf(http.StatusForbidden, contract.CodeForbidden,
			"conversation %s does not belong to this worker's tenant-env", req.ConversationID)
	}
	tok, claims := s.cfg.Keyring.MintWorkerToken(ident.Tenant, ident.Env, c.ID, s.cfg.Now())
	httpapi.WriteJSON(w, http.StatusOK, contract.MintResponse{
		Token: tok, ExpiresAt: unixTime(claims.ExpiresAt), KeyID: trust.WorkerTokenKeyID(tok),
	})
	return nil
}
