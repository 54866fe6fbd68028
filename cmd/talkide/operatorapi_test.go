package main

import (
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/roles/rolestest"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/syncbuf"
)

// TestOperatorAPIEndToEnd: a token issued with talkide admin
// operator-token opens the running control-plane's operator API, which
// shares the limits the CLI sets; a revoked one does not; /metrics is
// served without one.
func TestOperatorAPIEndToEnd(t *testing.T) {
	dir, _ := rolestest.NewControlPlaneDir(t)
	d := "--data-dir=" + dir
	var logs syncbuf.Buffer
	cp := startT(t, roles.StartControlPlane, roles.ControlPlaneConfig{
		Listen: "127.0.0.1:0", DBPath: filepath.Join(dir, "controlplane.db"), SecretsPath: filepath.Join(dir, "controlplane-secrets.json"),
		Tenant: "local", Env: "dev", Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	base := cp.HTTP.URL()
	call := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, b := roundtrip.Do(t, req)
		return resp.StatusCode, b
	}

	if st, _ := call("GET", "/api/admin/limits", "", ""); st != http.StatusUnauthorized {
		t.Errorf("no token: %d", st)
	}
	token, note := mustAdmin(t, "operator-token", "issue", d, "--name", "ops team")
	token = strings.TrimSpace(token)
	if !strings.HasPrefix(token, "tko_") || strings.Contains(note, token) {
		t.Fatalf("operator-token issue printed %q, note %q", token, note)
	}
	list, _ := mustAdmin(t, "operator-token", "list", d)
	id := strings.TrimPrefix(strings.SplitN(token, ".", 2)[0], "tko_")
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + `\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+ops team$`).MatchString(list) {
		t.Errorf("operator-token list:\n%s", list)
	}

	mustAdmin(t, "budget", "set", d, "--user", "alice", "--kind", "daily", "--amount", "5")
	if st, body := call("GET", "/api/admin/users/alice/limits", token, ""); st != 200 || !strings.Contains(body, `"max_usd":"5.00"`) {
		t.Errorf("GET alice's limits: %d %s", st, body)
	}
	if st, body := call("PUT", "/api/admin/tenants/local/limits/rpm", token, `{"max":120}`); st != 200 {
		t.Errorf("PUT a tenant limit: %d %s", st, body)
	}
	out, _ := mustAdmin(t, "budget", "get", d, "--tenant", "local")
	if !strings.Contains(out, "requests_per_minute") || !strings.Contains(out, "120") {
		t.Errorf("budget get after the API set a limit:\n%s", out)
	}
	if st, body := call("GET", "/api/admin/usage?by=model", token, ""); st != 200 || !strings.Contains(body, `"rows":[]`) {
		t.Errorf("GET usage: %d %s", st, body)
	}

	st, body := call("GET", "/metrics", "", "")
	if st != 200 || !strings.Contains(body, "talkide_budget_reservations_in_flight 0") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET /metrics: %d\n%s", st, body)
	}

	mustAdmin(t, "operator-token", "revoke", d, "--id", id)
	if st, _ := call("GET", "/api/admin/limits", token, ""); st != http.StatusUnauthorized {
		t.Errorf("a revoked token: %d", st)
	}
	if strings.Contains(logs.String(), strings.SplitN(token, ".", 2)[1]) {
		t.Error("the control-plane's log holds the operator token")
	}
}

// TestMetricsAfterChatTurn: after a turn of talkide dev, the control-plane's
// /metrics counts its model calls and the tokens the ledger charged them.
func TestMetricsAfterChatTurn(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	c := createConversation(t, base)
	r := send(t, base, c.ID, "hello, metrics")
	readStream(t, base, c.ID, 0, turnEnded(r.TurnID))
	if err := st.ControlPlane.Budget.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	es, err := st.ControlPlane.Budget.Ledger(t.Context(), budget.LedgerQuery{Conversation: c.ID})
	if err != nil || len(es) == 0 {
		t.Fatalf("ledger: %v, %v", es, err)
	}
	var tokens float64
	for _, e := range es {
		tokens += float64(e.InputTokens + e.OutputTokens + e.CacheWrite5mTokens + e.CacheWrite1hTokens + e.CacheReadTokens)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	text := string(b)
	sum := func(prefix string) (n float64) {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, prefix) {
				if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
					n += v
				}
			}
		}
		return n
	}
	if got := sum(`talkide_gateway_requests_total{code="2xx",env="dev",`); got != float64(len(es)) {
		t.Errorf("2xx requests of local/dev = %v, want %d (the ledger's entries)\n%s", got, len(es), text)
	}
	if got := sum(`talkide_budget_tokens_total{env="dev",`); got != tokens {
		t.Errorf("tokens = %v, want %v (the ledger's)", got, tokens)
	}
	if strings.Contains(text, c.ID) {
		t.Errorf("/metrics names the conversation:\n%s", text)
	}
}
