package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/cli/clitest"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/roles/rolestest"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/syncbuf"
)

// TestAdminUsersAndAPITokens: memberships and API tokens kept with talkide
// admin, then used against a running control-plane whose listeners are
// apart.
func TestAdminUsersAndAPITokens(t *testing.T) {
	dir, _ := rolestest.NewControlPlaneDir(t)
	d := "--data-dir=" + dir
	mustAdmin(t, "env", "add", d, "--tenant", "acme", "--env", "prod", "--worker-url", "http://127.0.0.1:1")
	mustAdmin(t, "env", "add", d, "--tenant", "acme", "--env", "staging", "--worker-url", "http://127.0.0.1:1")

	out, _ := mustAdmin(t, "user", "add", d, "--tenant", "acme", "--user", "alice")
	if !strings.Contains(out, "alice is member of tenant acme (every env)") {
		t.Errorf("user add: %q", out)
	}
	mustAdmin(t, "user", "add", d, "--tenant", "acme", "--env", "staging", "--user", "bob", "--role", "tenant-admin")
	// Again with another role: changed, not doubled.
	mustAdmin(t, "user", "add", d, "--tenant", "acme", "--user", "alice", "--role", "tenant-admin")
	out, _ = mustAdmin(t, "user", "list", d, "--tenant", "acme")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "alice") || !strings.Contains(lines[1], "*") || !strings.Contains(lines[1], "tenant-admin") ||
		!strings.Contains(lines[2], "bob") || !strings.Contains(lines[2], "staging") {
		t.Errorf("user list:\n%s", out)
	}

	for name, args := range map[string][]string{
		"no tenant":        {"user", "add", d, "--user", "carol"},
		"unknown tenant":   {"user", "add", d, "--tenant", "nope", "--user", "carol"},
		"unknown env":      {"user", "add", d, "--tenant", "acme", "--env", "nope", "--user", "carol"},
		"bad role":         {"user", "add", d, "--tenant", "acme", "--user", "carol", "--role", "operator"},
		"bad user id":      {"user", "add", d, "--tenant", "acme", "--user", "../carol"},
		"remove unknown":   {"user", "remove", d, "--tenant", "acme", "--user", "carol"},
		"token no user":    {"api-token", "issue", d},
		"token unknown":    {"api-token", "issue", d, "--user", "nobody"},
		"token bad ttl":    {"api-token", "issue", d, "--user", "alice", "--ttl", "-1h"},
		"revoke a token":   {"api-token", "revoke", d, "--id", "tka_abc.def"},
		"list no selector": {"user", "list", d},
	} {
		if _, _, err := admin(t, args...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}

	tok, note := mustAdmin(t, "api-token", "issue", d, "--user", "alice", "--name", "laptop", "--ttl", "1h")
	tok = strings.TrimSpace(tok)
	if !strings.HasPrefix(tok, "tka_") || strings.Contains(note, tok) {
		t.Fatalf("api-token issue printed %q, note %q", tok, note)
	}
	out, _ = mustAdmin(t, "api-token", "list", d)
	if !strings.Contains(out, "laptop") || !strings.Contains(out, "alice") || strings.Contains(out, tok[strings.Index(tok, ".")+1:]) {
		t.Errorf("api-token list:\n%s", out)
	}

	var logs syncbuf.Buffer
	cp := startT(t, roles.StartControlPlane, roles.ControlPlaneConfig{
		Listen: "127.0.0.1:0", InternalListen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0",
		DBPath: filepath.Join(dir, "controlplane.db"), SecretsPath: filepath.Join(dir, "controlplane-secrets.json"),
		Tenant: "acme", Env: "prod", Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	call := func(base, method, path, token string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, _ := roundtrip.Do(t, req)
		return resp.StatusCode
	}
	pub, internal, metrics := cp.HTTP.URL(), cp.Internal.URL(), cp.Metrics.URL()
	if got := call(pub, http.MethodGet, "/api/conversations", tok); got != http.StatusOK {
		t.Errorf("list with the token: %d", got)
	}
	if got := call(pub, http.MethodGet, "/api/conversations", ""); got != http.StatusUnauthorized {
		t.Errorf("list without a token: %d", got)
	}
	for _, p := range []string{controlplane.MintPath, controlplane.GatewayPrefix + "/v1/messages", "/api/internal/worker/reports", "/api/admin/limits", "/metrics"} {
		if got := call(pub, http.MethodPost, p, ""); got != http.StatusNotFound {
			t.Errorf("public listener: POST %s: %d, want 404", p, got)
		}
	}
	if got := call(internal, http.MethodPost, controlplane.MintPath, ""); got == http.StatusNotFound {
		t.Errorf("internal listener: the mint is 404")
	}
	if got := call(internal, http.MethodGet, "/api/conversations", tok); got != http.StatusNotFound {
		t.Errorf("internal listener: the browser API: %d, want 404", got)
	}
	if got := call(metrics, http.MethodGet, "/metrics", ""); got != http.StatusOK {
		t.Errorf("metrics listener: %d", got)
	}

	// talkide login checks the token and stores it 0600; talkide chat --url
	// finds it. (acme/prod's worker does not exist: getting that far is
	// what shows the token worked.)
	creds := filepath.Join(t.TempDir(), "cfg", "tokens.json")
	talk := func(stdin string, args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), args, stdio{in: strings.NewReader(stdin), out: &out, err: &errb})
		return out.String() + errb.String(), err
	}
	if out, err := talk("tka_bad.0123456789abcdef0123\n", "login", "--url", pub, "--credentials", creds); err == nil {
		t.Errorf("login with a bad token: %s", out)
	}
	if _, err := os.Stat(creds); err == nil {
		t.Error("a refused token was stored")
	}
	if out, err := talk(tok+"\n", "login", "--url", pub+"/", "--credentials", creds); err != nil {
		t.Fatalf("login: %v: %s", err, out)
	}
	fi, err := os.Stat(creds)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("tokens file: %v, %v; want mode 0600", fi, err)
	}
	out, err = talk("", "chat", "--url", pub, "--credentials", creds, "-m", "hi")
	if err == nil || !strings.Contains(out+err.Error(), "unreachable") {
		t.Errorf("chat with the stored token: %v: %s (want the worker unreachable)", err, out)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(tokFile, []byte("tka_nope.0123456789abcdef0123\n"), 0o600))
	out, err = talk("", "chat", "--url", pub, "--token-file", tokFile, "-m", "hi")
	if err == nil || !strings.Contains(strings.ToLower(out+err.Error()), "unauthorized") {
		t.Errorf("chat with a bad token file: %v: %s (want 401)", err, out)
	}

	// Revoked, the token opens nothing; removed, the user sees nothing.
	id := strings.TrimPrefix(tok[:strings.Index(tok, ".")], "tka_")
	out, _ = mustAdmin(t, "api-token", "revoke", d, "--id", id)
	if !strings.Contains(out, "revoked API token "+id) {
		t.Errorf("revoke: %q", out)
	}
	if got := call(pub, http.MethodGet, "/api/conversations", tok); got != http.StatusUnauthorized {
		t.Errorf("revoked token: %d, want 401", got)
	}
	out, _ = mustAdmin(t, "user", "remove", d, "--tenant", "acme", "--env", "staging", "--user", "bob")
	if !strings.Contains(out, "bob is no longer a member of tenant-env acme/staging") {
		t.Errorf("remove: %q", out)
	}
	if strings.Contains(logs.String(), tok) {
		t.Error("the control-plane logged the token")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// admin runs talkide admin with args and returns stdout and stderr.
func admin(t *testing.T, args ...string) (string, string, error) {
	return clitest.Run(runLib, append([]string{"admin"}, args...)...)
}

func mustAdmin(t *testing.T, args ...string) (string, string) {
	t.Helper()
	return clitest.Must(t, runLib, append([]string{"admin"}, args...)...)
}

// runLib is run for clitest, which passes cli.Stdio.
func runLib(ctx context.Context, args []string, std cli.Stdio) error {
	return run(ctx, args, stdio{in: std.In, out: std.Out, err: std.Err, signals: std.Signals})
}
