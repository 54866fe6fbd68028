package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/trust"
)

// TestDevRefusesRebindingAndPathTricks attacks a running talkide dev the
// way a web page the developer opens could, through a host name of its
// own rebound to 127.0.0.1: the control-plane's /metrics and /healthz and
// the worker's /healthz refuse a Host that is not loopback. And paths with
// "..", "." or "//" are answered 400 (Anthropic-shaped under the gateway's
// prefix), never with a redirect to where they would lead.
func TestDevRefusesRebindingAndPathTricks(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(req *http.Request) (int, string) {
		t.Helper()
		resp, b := roundtrip.With(t, noRedirect, req)
		return resp.StatusCode, string(b)
	}
	get := func(url, host string) (int, string) {
		t.Helper()
		req := newReq(t, http.MethodGet, url, nil, nil)
		if host != "" {
			req.Host = host
		}
		return do(req)
	}

	for _, url := range []string{base + "/metrics", base + "/healthz", st.Info.Worker + contract.HealthPath} {
		if status, body := get(url, "evil.example:7878"); status != http.StatusForbidden || strings.Contains(body, "talkide_") || strings.Contains(body, `"ok"`) {
			t.Errorf("GET %s with a rebound Host: %d %.200s; want 403 and nothing of the endpoint", url, status, body)
		}
		if status, body := get(url, ""); status != http.StatusOK {
			t.Errorf("GET %s on loopback: %d %.200s", url, status, body)
		}
	}

	post := func(path string) (int, string) {
		t.Helper()
		return do(newReq(t, http.MethodPost, base+path, []byte(`{"model":"claude-sonnet-5-5","max_tokens":8,"messages":[]}`), nil))
	}
	for path, anthropic := range map[string]bool{
		"/api/conversations/../internal/gateway/anthropic/v1/messages": true,
		contract.GatewayPrefix + "/../../../../api/conversations":      true,
		contract.GatewayPrefix + "//v1/messages":                       true,
		"/api/conversations/x/../../admin/limits":                      false,
		"//api/conversations":                                          false,
	} {
		status, body := post(path)
		if status != http.StatusBadRequest {
			t.Errorf("POST %s: %d %.200s; want 400", path, status, body)
			continue
		}
		if got := strings.Contains(body, `"type":"error"`) && strings.Contains(body, "invalid_request_error"); got != anthropic {
			t.Errorf("POST %s: Anthropic-shaped %v, want %v: %s", path, got, anthropic, body)
		}
		if !anthropic && !strings.Contains(body, `"code":"bad_request"`) {
			t.Errorf("POST %s: not the contract's error shape: %s", path, body)
		}
	}
}

// TestDevWorkerCommandsStrictJSON: the worker's commands, validly signed,
// are held to the same JSON rules as the control-plane's endpoints: a key
// twice or in another case is a 400 naming it, and no session is made.
func TestDevWorkerCommandsStrictJSON(t *testing.T) {
	st, _ := startTestStack(t)
	signer := &trust.Signer{Direction: trust.ToWorker, Tenant: roles.DevTenant, Env: roles.DevEnv, KeyID: st.ControlPlane.Secrets.CommandKeyID,
		Key: trust.DeriveEnvKey(st.ControlPlane.Secrets.CommandSecret, roles.DevTenant, roles.DevEnv)}
	for body, want := range map[string]string{
		`{"conversation_id":"dup-a","conversation_id":"dup-b"}`: `the key \"conversation_id\" twice`,
		`{"Conversation_ID":"dup-c"}`:                           `the key \"Conversation_ID\" where \"conversation_id\" is meant`,
	} {
		req := newReq(t, http.MethodPost, st.Info.Worker+contract.SessionsPath, []byte(body), nil)
		signer.Sign(req, []byte(body))
		status, resp := do(t, req)
		if status != http.StatusBadRequest || !strings.Contains(resp, want) {
			t.Errorf("%s: %d %s; want 400 saying %s", body, status, resp, want)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(st.Info.ClaudeConfigDir, "projects"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "dup-") {
			t.Errorf("a session %s was created", e.Name())
		}
	}
}
