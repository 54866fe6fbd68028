package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/minting"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, body := roundtrip.Do(t, req)
	return resp.StatusCode, body
}

func newReq(t *testing.T, method, url string, body []byte, hdr map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

// mint calls the mint endpoint with an identity token.
func mint(t *testing.T, base, identity, conv string) (int, contract.MintResponse) {
	t.Helper()
	body, _ := json.Marshal(contract.MintRequest{ConversationID: conv})
	req := newReq(t, http.MethodPost, base+minting.MintPath, body, map[string]string{"Authorization": "Bearer " + identity})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out contract.MintResponse
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// otherEnv provisions tenant acme / env other with a conversation and an
// identity token of its own.
func otherEnv(t *testing.T, st *roles.Dev) (identity, conv string) {
	t.Helper()
	ctx := context.Background()
	s := st.ControlPlane.Store
	if err := s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "other", WorkerURL: "http://127.0.0.1:1", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s.PutUser(ctx, store.User{ID: "eve", Name: "eve", CreatedAt: time.Now()})
	if _, _, err := s.CreateConversation(ctx, store.Conversation{ID: "c-acme", Tenant: "acme", Env: "other", UserID: "eve", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tok := trust.NewIdentityToken()
	if err := s.AddIdentityToken(ctx, store.IdentityToken{ID: tok.ID, Tenant: "acme", Env: "other", Hash: tok.Hash, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return tok.Token, "c-acme"
}

func devIdentity(t *testing.T, st *roles.Dev) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(st.Config().DataDir, "worker", "identity-token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestSecurityBoundaries(t *testing.T) {
	st, logs := startTestStack(t)
	base := st.Info.ControlPlane
	a := createConversation(t, base).ID
	b := createConversation(t, base).ID
	identity := devIdentity(t, st)
	otherIdentity, otherConv := otherEnv(t, st)

	status, tokA := mint(t, base, identity, a)
	if status != http.StatusOK || !strings.HasPrefix(tokA.Token, "wt1.") {
		t.Fatalf("mint for own conversation: %d", status)
	}
	status, tokOther := mint(t, base, otherIdentity, otherConv)
	if status != http.StatusOK {
		t.Fatalf("mint for the other env's own conversation: %d", status)
	}
	keyring := st.ControlPlane.Secrets.Tokens()
	expired, _ := keyring.MintWorkerToken(roles.DevTenant, roles.DevEnv, a, time.Now().Add(-3*time.Minute))
	tampered := []byte(tokA.Token)
	tampered[len("wt1.k1.")+3] ^= 1

	t.Run("gateway", func(t *testing.T) {
		body := []byte(`{"model":"claude-sonnet-5-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`)
		url := st.Info.Gateway + "/v1/messages?beta=true"
		tests := map[string]struct {
			token, conv string
			want        int
		}{
			"no token":                   {"", a, http.StatusUnauthorized},
			"tampered":                   {string(tampered), a, http.StatusUnauthorized},
			"expired":                    {expired, a, http.StatusUnauthorized},
			"garbage":                    {"wt1.x.y.z", a, http.StatusUnauthorized},
			"other conversation's token": {tokA.Token, b, http.StatusForbidden},
			"other tenant-env's token":   {tokOther.Token, a, http.StatusForbidden},
			"bad conversation id":        {tokA.Token, "../x", http.StatusBadRequest},
			"valid":                      {tokA.Token, a, http.StatusOK},
		}
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				hdr := map[string]string{"Content-Type": "application/json", minting.ConversationHeader: tc.conv}
				if tc.token != "" {
					hdr[minting.TokenHeader] = tc.token
				}
				got, resp := do(t, newReq(t, http.MethodPost, url, body, hdr))
				if got != tc.want {
					t.Fatalf("status %d, want %d: %s", got, tc.want, resp)
				}
				if got != http.StatusOK && !strings.Contains(resp, `"type":"error"`) {
					t.Errorf("error body is not Anthropic-shaped: %s", resp)
				}
			})
		}
	})

	t.Run("browser API refuses what a web page could send", func(t *testing.T) {
		body := []byte(`{"text":"[[tool:Bash {\"command\":\"id\"}]]"}`)
		url := base + "/api/conversations/" + a + "/messages"
		tests := map[string]struct {
			hdr  map[string]string
			host string
			want int
		}{
			"text/plain body (no preflight)": {hdr: map[string]string{"Content-Type": "text/plain"}, want: http.StatusUnsupportedMediaType},
			"cross-origin":                   {hdr: map[string]string{"Origin": "https://evil.example"}, want: http.StatusForbidden},
			"rebound host name":              {host: "evil.example:7878", want: http.StatusForbidden},
			"same-origin":                    {hdr: map[string]string{"Origin": base}, want: http.StatusAccepted},
		}
		for name, tc := range tests {
			req := newReq(t, http.MethodPost, url, body, tc.hdr)
			if tc.host != "" {
				req.Host = tc.host
			}
			got, resp := do(t, req)
			if got != tc.want {
				t.Errorf("%s: status %d, want %d: %s", name, got, tc.want, resp)
			}
			if got == http.StatusAccepted {
				var r contract.SendMessageResponse
				json.Unmarshal([]byte(resp), &r)
				readStream(t, base, a, 0, turnEnded(r.TurnID))
			}
		}
	})

	t.Run("mint", func(t *testing.T) {
		if got, _ := mint(t, base, "tki_AAAAAAAAAAAA.BBBBBBBBBBBBBBBBBBBBBBBBBBBBBB", a); got != http.StatusUnauthorized {
			t.Errorf("wrong identity token: %d", got)
		}
		if got, _ := mint(t, base, identity+"x", a); got != http.StatusUnauthorized {
			t.Errorf("altered identity token: %d", got)
		}
		if got, _ := mint(t, base, "", a); got != http.StatusUnauthorized {
			t.Errorf("no identity token: %d", got)
		}
		if got, _ := mint(t, base, identity, otherConv); got != http.StatusForbidden {
			t.Errorf("mint for another tenant-env's conversation: %d", got)
		}
		if got, _ := mint(t, base, identity, "no-such-conversation"); got != http.StatusForbidden {
			t.Errorf("mint for a missing conversation: %d", got)
		}
	})

	t.Run("worker commands", func(t *testing.T) {
		body, _ := json.Marshal(contract.CreateSessionRequest{ConversationID: "zzz"})
		url := st.Info.Worker + contract.SessionsPath
		good := &trust.Signer{Direction: trust.ToWorker, Tenant: roles.DevTenant, Env: roles.DevEnv, KeyID: st.ControlPlane.Secrets.CommandKeyID,
			Key: trust.DeriveEnvKey(st.ControlPlane.Secrets.CommandSecret, roles.DevTenant, roles.DevEnv)}
		wrongKey := *good
		wrongKey.Key = trust.NewKey()
		otherEnvKey := *good
		otherEnvKey.Tenant, otherEnvKey.Env = "acme", "other"
		otherEnvKey.Key = trust.DeriveEnvKey(st.ControlPlane.Secrets.CommandSecret, "acme", "other")
		wrongDirection := *good
		wrongDirection.Direction = trust.ToControlPlane

		for name, signer := range map[string]*trust.Signer{"unsigned": nil, "wrong key": &wrongKey, "other tenant-env": &otherEnvKey, "wrong direction": &wrongDirection} {
			req := newReq(t, http.MethodPost, url, body, nil)
			if signer != nil {
				signer.Sign(req, body)
			}
			if got, resp := do(t, req); got != http.StatusUnauthorized {
				t.Errorf("%s: status %d: %s", name, got, resp)
			}
		}
		req := newReq(t, http.MethodPost, url, body, nil)
		good.Sign(req, body)
		replay := req.Header.Get(trust.SignatureHeader)
		if got, resp := do(t, req); got != http.StatusCreated {
			t.Fatalf("signed command: %d %s", got, resp)
		}
		again := newReq(t, http.MethodPost, url, body, map[string]string{trust.SignatureHeader: replay})
		if got, _ := do(t, again); got != http.StatusUnauthorized {
			t.Errorf("replayed command: status %d", got)
		}
		// A valid signature does not carry over to another body.
		other := []byte(`{"conversation_id":"yyy"}`)
		moved := newReq(t, http.MethodPost, url, other, map[string]string{trust.SignatureHeader: replay})
		if got, _ := do(t, moved); got != http.StatusUnauthorized {
			t.Errorf("signature moved to another body: status %d", got)
		}
	})

	t.Run("conversation ids", func(t *testing.T) {
		signer := &trust.Signer{Direction: trust.ToWorker, Tenant: roles.DevTenant, Env: roles.DevEnv, KeyID: st.ControlPlane.Secrets.CommandKeyID,
			Key: trust.DeriveEnvKey(st.ControlPlane.Secrets.CommandSecret, roles.DevTenant, roles.DevEnv)}
		for _, bad := range []string{"../x", "a/b", "..", ".", "x y", strings.Repeat("a", 200)} {
			esc := strings.NewReplacer("/", "%2F", ".", "%2E", " ", "%20").Replace(bad)
			body, _ := json.Marshal(map[string]string{"id": bad})
			checks := []*http.Request{
				newReq(t, http.MethodPost, base+"/api/conversations", body, nil),
				newReq(t, http.MethodGet, base+"/api/conversations/"+esc, nil, nil),
				newReq(t, http.MethodPost, base+"/api/conversations/"+esc+"/messages", []byte(`{"text":"hi"}`), nil),
				newReq(t, http.MethodPost, base+"/api/conversations/"+esc+"/interrupt", nil, nil),
				newReq(t, http.MethodGet, base+"/api/conversations/"+esc+"/stream", nil, nil),
				newReq(t, http.MethodPost, base+minting.MintPath, mustJSON(contract.MintRequest{ConversationID: bad}), map[string]string{"Authorization": "Bearer " + identity}),
				newReq(t, http.MethodPost, st.Info.LocalProxy+"/"+esc+"/v1/messages", []byte(`{}`), nil),
			}
			wbody := mustJSON(contract.CreateSessionRequest{ConversationID: bad})
			create := newReq(t, http.MethodPost, st.Info.Worker+contract.SessionsPath, wbody, nil)
			signer.Sign(create, wbody)
			state := newReq(t, http.MethodGet, st.Info.Worker+"/v1/sessions/"+esc, nil, nil)
			signer.Sign(state, nil)
			checks = append(checks, create, state)
			for _, req := range checks {
				if got, resp := do(t, req); got != http.StatusBadRequest {
					t.Errorf("id %q: %s %s: status %d, want 400: %s", bad, req.Method, req.URL, got, resp)
				}
			}
		}
		entries, _ := os.ReadDir(filepath.Join(st.Info.ClaudeConfigDir, "projects"))
		for _, e := range entries {
			if strings.Contains(e.Name(), ".") {
				t.Errorf("a session directory %q was created", e.Name())
			}
		}
	})

	t.Run("no secret in any log line", func(t *testing.T) {
		// Run a real turn so that every component has logged.
		r := send(t, base, a, `[[tool:Bash {"command":"echo ok"}]]`)
		readStream(t, base, a, 0, turnEnded(r.TurnID))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := st.RestartWorker(ctx); err != nil {
			t.Fatal(err)
		}
		text := logs.String()
		if !strings.Contains(text, "gateway") || !strings.Contains(text, "turn finished") {
			t.Fatalf("the logs look empty; the check would prove nothing:\n%s", text)
		}
		secrets := map[string]string{
			"simulator API key":      st.SimulatorKey(),
			"identity token":         identity,
			"identity token secret":  identity[strings.Index(identity, ".")+1:],
			"other identity token":   otherIdentity,
			"minted token":           tokA.Token,
			"minted token signature": tokA.Token[strings.LastIndex(tokA.Token, ".")+1:],
			"command secret":         base64.StdEncoding.EncodeToString(st.ControlPlane.Secrets.CommandSecret),
			"derived command key":    base64.StdEncoding.EncodeToString(trust.DeriveEnvKey(st.ControlPlane.Secrets.CommandSecret, roles.DevTenant, roles.DevEnv)),
		}
		for name, secret := range secrets {
			if secret == "" {
				t.Fatalf("%s is empty", name)
			}
			if strings.Contains(text, secret) {
				t.Errorf("the logs contain the %s", name)
			}
		}
		for _, prefix := range []string{"wt1.", "tki_", "sk-sim-", "tlp_"} {
			if strings.Contains(text, prefix) {
				t.Errorf("the logs contain something shaped like a credential (%q)", prefix)
			}
		}
	})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
