package controlplane_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// addIdentity stores a fresh identity token of tenant/envName and returns the
// token; mutate adjusts the stored row.
func (h *harness) addIdentity(envName string, mutate func(*store.IdentityToken)) string {
	h.t.Helper()
	it := trust.NewIdentityToken()
	rec := store.IdentityToken{
		ID: it.ID, Tenant: tenant, Env: envName, Hash: it.Hash,
		CreatedAt: start.Add(-time.Hour), ExpiresAt: start.Add(90 * 24 * time.Hour),
	}
	if mutate != nil {
		mutate(&rec)
	}
	if err := h.store.AddIdentityToken(h.t.Context(), rec); err != nil {
		h.t.Fatal(err)
	}
	return it.Token
}

func TestMint(t *testing.T) {
	h := demoHarness(t)
	h.insertConversation("elsewhere", user, otherEnv)
	h.clock.Advance(10 * time.Minute)
	now := h.clock.Now()

	valid := h.addIdentity(env, nil)
	revoked := h.addIdentity(env, nil)
	if err := h.store.RevokeIdentityToken(t.Context(), strings.TrimPrefix(strings.Split(revoked, ".")[0], "tki_"), now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	revokedNow := h.addIdentity(env, func(r *store.IdentityToken) { r.RevokedAt = now })
	revokedLater := h.addIdentity(env, func(r *store.IdentityToken) { r.RevokedAt = now.Add(time.Minute) })
	expired := h.addIdentity(env, func(r *store.IdentityToken) { r.ExpiresAt = now.Add(-time.Second) })
	expiresNow := h.addIdentity(env, func(r *store.IdentityToken) { r.ExpiresAt = now })
	id, _, _ := strings.Cut(valid, ".")
	wrongSecret := id + "." + strings.Repeat("A", 43)
	unknownID := trust.NewIdentityToken().Token

	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	tests := map[string]struct {
		header     http.Header
		body       string
		wantStatus int
		wantCode   string // "" for 200
	}{
		"valid":                       {header: bearer(valid), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusOK},
		"lower-case scheme":           {header: http.Header{"Authorization": {"bearer " + valid}}, body: `{"conversation_id":"demo"}`, wantStatus: http.StatusOK},
		"revoked later, still good":   {header: bearer(revokedLater), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusOK},
		"revoked":                     {header: bearer(revoked), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"revoked now":                 {header: bearer(revokedNow), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"expired":                     {header: bearer(expired), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"expires now":                 {header: bearer(expiresNow), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"unknown id":                  {header: bearer(unknownID), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"wrong secret":                {header: bearer(wrongSecret), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"malformed":                   {header: bearer("tki_nope"), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"a worker token":              {header: bearer("wt1.k1.e30.AAAA"), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"empty bearer":                {header: bearer(""), body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"missing authorization":       {body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"basic scheme":                {header: http.Header{"Authorization": {"Basic " + valid}}, body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"token without scheme":        {header: http.Header{"Authorization": {valid}}, body: `{"conversation_id":"demo"}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"unauthorized and bad body":   {header: bearer(wrongSecret), body: `{"nope":1}`, wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized},
		"unknown field":               {header: bearer(valid), body: `{"conversation_id":"demo","env":"prod"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"empty body":                  {header: bearer(valid), body: ``, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"bad conversation id":         {header: bearer(valid), body: `{"conversation_id":"../demo"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeInvalidID},
		"body over 4 KiB":             {header: bearer(valid), body: `{"conversation_id":"` + strings.Repeat("d", 4<<10) + `"}`, wantStatus: http.StatusRequestEntityTooLarge, wantCode: contract.CodeTooLarge},
		"conversation of another env": {header: bearer(valid), body: `{"conversation_id":"elsewhere"}`, wantStatus: http.StatusForbidden, wantCode: contract.CodeForbidden},
		"no such conversation":        {header: bearer(valid), body: `{"conversation_id":"nobody"}`, wantStatus: http.StatusForbidden, wantCode: contract.CodeForbidden},
	}
	unauthorized := map[string][]byte{}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			resp, body := h.do(http.MethodPost, controlplane.MintPath, tt.body, tt.header)
			if tt.wantCode != "" {
				wantError(t, resp, body, tt.wantStatus, tt.wantCode)
				if tt.wantStatus == http.StatusUnauthorized {
					unauthorized[name] = body
				}
				return
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d: %s", resp.StatusCode, body)
			}
			var got contract.MintResponse
			decodeJSON(t, body, &got)
			claims, err := h.keyring.VerifyWorkerToken(got.Token, now)
			if err != nil {
				t.Fatalf("the keyring refuses the minted token: %v", err)
			}
			exp := now.Add(trust.WorkerTokenTTL)
			want := trust.WorkerClaims{Tenant: tenant, Env: env, ConversationID: "demo", IssuedAt: now.Unix(), ExpiresAt: exp.Unix(), ID: claims.ID}
			if diff := cmp.Diff(want, claims); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}
			if claims.ID == "" {
				t.Error("the token has no jti")
			}
			if !got.ExpiresAt.Equal(exp) || got.KeyID != tokenKID {
				t.Errorf("expires_at=%v key_id=%q, want %v %q", got.ExpiresAt, got.KeyID, exp, tokenKID)
			}
			if _, err := h.keyring.VerifyWorkerToken(got.Token, exp); err == nil {
				t.Errorf("the token still verifies at its expiry")
			}
		})
	}
	// No oracle: every identity failure answers the same bytes.
	var first []byte
	for name, body := range unauthorized {
		if first == nil {
			first = body
			continue
		}
		if !bytes.Equal(first, body) {
			t.Errorf("%s: 401 body %s differs from %s", name, body, first)
		}
	}
	if len(unauthorized) < 10 {
		t.Errorf("only %d 401 answers compared", len(unauthorized))
	}
}
