package admincmd

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/cli/clitest"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/roles/rolestest"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// run runs the command line args on a root holding the admin and sessions
// trees, as cmd/talkide's does.
func run(ctx context.Context, args []string, std cli.Stdio) error {
	root := cli.NewGroup("talkide", "TalkIDE")
	root.SetIn(std.In)
	root.SetOut(std.Out)
	root.SetErr(std.Err)
	root.AddCommand(New(std), NewSessions(std))
	return cli.Run(ctx, root, args)
}

// admin runs talkide admin with args and returns stdout and stderr.
func admin(t *testing.T, args ...string) (string, string, error) {
	return clitest.Run(run, append([]string{"admin"}, args...)...)
}

func mustAdmin(t *testing.T, args ...string) (string, string) {
	t.Helper()
	return clitest.Must(t, run, append([]string{"admin"}, args...)...)
}

func TestAdminProvisioning(t *testing.T) {
	dir, secrets := rolestest.NewControlPlaneDir(t)
	d := "--data-dir=" + dir

	out, _ := mustAdmin(t, "env", "add", d, "--tenant", "acme", "--env", "prod", "--worker-url", "http://talkide-worker.acme-prod.svc:8080")
	if !strings.Contains(out, "acme/prod") || !strings.Contains(out, "namespace acme-prod") {
		t.Errorf("env add printed %q", out)
	}
	mustAdmin(t, "env", "add", d, "--tenant", "acme", "--env", "dev", "--worker-url", "http://w2:8080")
	out, _ = mustAdmin(t, "env", "list", d)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TENANT") ||
		!strings.Contains(lines[1], "acme-dev") || !strings.Contains(lines[2], "http://talkide-worker.acme-prod.svc:8080") {
		t.Errorf("env list:\n%s", out)
	}

	// Issue, as JSON: the Secret's token authenticates against the store,
	// and its command key is the tenant-env's derived key.
	out, note := mustAdmin(t, "token", "issue", d, "--tenant", "acme", "--env", "prod", "--output", "json", "--ttl", "48h")
	var m struct {
		Metadata struct {
			Namespace   string
			Annotations map[string]string
		}
		Data map[string]string
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("issue --output json: %v\n%s", err, out)
	}
	field := func(k string) string {
		b, err := base64.StdEncoding.DecodeString(m.Data[k])
		if err != nil {
			t.Fatalf("data %s: %v", k, err)
		}
		return string(b)
	}
	token := field(provision.KeyIdentityToken)
	if m.Metadata.Namespace != "acme-prod" || field(provision.KeyCommandKeyID) != secrets.CommandKeyID {
		t.Errorf("secret metadata %+v, key id %q", m.Metadata, field(provision.KeyCommandKeyID))
	}
	parsed, err := trust.ParseKey(field(provision.KeyCommandKey), "")
	key := parsed.Secret
	if err != nil || parsed.ID != secrets.CommandKeyID || !bytes.Equal(key, trust.DeriveEnvKey(secrets.CommandSecret, "acme", "prod")) {
		t.Errorf("command key is not DeriveEnvKey(master, acme, prod) (err %v)", err)
	}
	st := openTestStore(t, dir)
	id, hash, err := trust.ParseIdentityToken(token)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetIdentityToken(t.Context(), id)
	if err != nil || !trust.HashesEqual(rec.Hash, hash) || rec.Tenant != "acme" || rec.Env != "prod" {
		t.Fatalf("issued token does not authenticate: %+v, %v", rec, err)
	}
	if left := time.Until(rec.ExpiresAt); left < 47*time.Hour || left > 48*time.Hour {
		t.Errorf("token expires in %s, want 48h", left)
	}
	if m.Metadata.Annotations["talkide/identity-token-id"] != id {
		t.Errorf("annotations %v do not name token %s", m.Metadata.Annotations, id)
	}
	if strings.Contains(note, token) || !strings.Contains(note, id) {
		t.Errorf("issue's note shows the token or misses its id: %q", note)
	}

	// Rotation: a second token (YAML this time), both valid until the old
	// one is revoked.
	yaml, _ := mustAdmin(t, "token", "issue", d, "--tenant", "acme", "--env", "prod")
	if !strings.Contains(yaml, "kind: Secret") || !strings.Contains(yaml, `name: "talkide-worker-token"`) || !strings.Contains(yaml, `namespace: "acme-prod"`) {
		t.Errorf("secret-yaml output:\n%s", yaml)
	}
	tok3, _ := mustAdmin(t, "token", "issue", d, "--tenant", "acme", "--env", "prod", "--output", "token")
	tok3 = strings.TrimSpace(tok3)
	for _, tk := range []string{token, tok3} {
		if _, err := provision.Authenticate(t.Context(), st, tk, time.Now()); err != nil {
			t.Fatalf("a token of the rotation fails: %v", err)
		}
	}
	out, _ = mustAdmin(t, "token", "revoke", d, "--id", id)
	if !strings.Contains(out, "revoked identity token "+id) {
		t.Errorf("revoke printed %q", out)
	}
	if _, err := provision.Authenticate(t.Context(), st, token, time.Now()); !errors.Is(err, provision.ErrInvalidToken) {
		t.Errorf("revoked token still authenticates: %v", err)
	}
	if _, err := provision.Authenticate(t.Context(), st, tok3, time.Now()); err != nil {
		t.Errorf("the new token fails after the old one is revoked: %v", err)
	}
	out, _ = mustAdmin(t, "token", "revoke", d, "--id", id)
	if !strings.Contains(out, "already revoked") {
		t.Errorf("second revoke printed %q", out)
	}

	// Only issue's stdout ever shows a secret.
	everything := []string{}
	for _, args := range [][]string{{"env", "list", d}, {"token", "revoke", d, "--id", id}, {"env", "add", d, "--tenant", "acme", "--env", "prod", "--worker-url", "http://x:1"}} {
		o, e := mustAdmin(t, args...)
		everything = append(everything, o, e)
	}
	_, e, err := admin(t, "token", "revoke", d, "--id", tok3) // a token pasted as an id
	if err == nil {
		t.Fatal("revoke with a whole token as the id succeeded")
	}
	everything = append(everything, e, err.Error())
	for _, s := range everything {
		for _, secret := range []string{token, tok3, base64.StdEncoding.EncodeToString(key), base64.StdEncoding.EncodeToString(secrets.CommandSecret)} {
			if strings.Contains(s, secret) {
				t.Errorf("output shows a secret: %q", s)
			}
		}
	}
}

func openTestStore(t *testing.T, dir string) store.Store {
	t.Helper()
	st, err := roles.OpenStore(t.Context(), "", filepath.Join(dir, "controlplane.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestAdminRefuses(t *testing.T) {
	dir, _ := rolestest.NewControlPlaneDir(t)
	empty := t.TempDir()
	d := "--data-dir=" + dir
	tests := map[string][]string{
		"no command":             {},
		"unknown command":        {"env", "remove"},
		"missing flags":          {"env", "add", d, "--tenant", "acme"},
		"bad tenant":             {"env", "add", d, "--tenant", "Acme", "--env", "prod", "--worker-url", "http://w"},
		"bad worker url":         {"env", "add", d, "--tenant", "acme", "--env", "prod", "--worker-url", "w:8080"},
		"stray argument":         {"env", "list", d, "extra"},
		"unknown env":            {"token", "issue", d, "--tenant", "acme", "--env", "nope"},
		"bad output":             {"token", "issue", d, "--tenant", "acme", "--env", "prod", "--output", "xml"},
		"bad ttl":                {"token", "issue", d, "--tenant", "acme", "--env", "prod", "--ttl", "-1h"},
		"no database here":       {"env", "list", "--data-dir", empty},
		"no secrets here":        {"token", "issue", "--data-dir", empty, "--database", filepath.Join(dir, "controlplane.db"), "--tenant", "acme", "--env", "prod"},
		"unknown token":          {"token", "revoke", d, "--id", "nosuchid"},
		"unknown database":       {"env", "list", d, "--database", "mysql://x"},
		"missing sqlite by path": {"env", "list", "--database", "sqlite:" + filepath.Join(empty, "x.db")},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			if _, _, err := admin(t, args...); err == nil {
				t.Fatalf("talkide admin %v succeeded", args)
			}
		})
	}
	// Nothing was created where there was nothing.
	if ents, _ := filepath.Glob(filepath.Join(empty, "*")); len(ents) != 0 {
		t.Errorf("admin created %v in an empty data dir", ents)
	}
	if _, _, err := admin(t); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("no arguments: err = %v, want flag.ErrHelp", err)
	}
}
