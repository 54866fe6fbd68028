package provision

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/goldenfile"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/store/storetest"
	"github.com/talkide/platform/internal/trust"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func newStore(t *testing.T) store.Store {
	t.Helper()
	st := storetest.Open(t, sqlite.Open, ":memory:")
	return st
}

func TestValidateNames(t *testing.T) {
	long := strings.Repeat("a", 40)
	tests := map[string]struct {
		tenant, env string
		ok          bool
	}{
		"simple":             {"acme", "prod", true},
		"dashes and digits":  {"acme-corp", "eu-1", true},
		"digit first":        {"1acme", "dev", true},
		"upper case":         {"Acme", "prod", false},
		"underscore":         {"acme_corp", "prod", false},
		"leading dash":       {"-acme", "prod", false},
		"trailing dash":      {"acme", "prod-", false},
		"empty tenant":       {"", "prod", false},
		"empty env":          {"acme", "", false},
		"dot":                {"acme", "pr.od", false},
		"slash":              {"acme", "../x", false},
		"semicolon":          {"acme", "a;b", false},
		"namespace too long": {long, long, false},
		"namespace at 63":    {strings.Repeat("a", 31), strings.Repeat("b", 31), true},
		"kube reserved":      {"kube", "system", false},
		"platform reserved":  {"talkide", "prod", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := ValidateNames(tc.tenant, tc.env)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateNames(%q, %q) = %v, want ok=%v", tc.tenant, tc.env, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidName) {
				t.Errorf("error %v does not wrap ErrInvalidName", err)
			}
		})
	}
}

func TestEnsureEnv(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	e, err := EnsureEnv(ctx, st, "acme", "prod", "http://talkide-worker.acme-prod.svc:8080/")
	if err != nil {
		t.Fatal(err)
	}
	if e.Tenant != "acme" || e.Name != "prod" || e.WorkerURL != "http://talkide-worker.acme-prod.svc:8080" || e.CreatedAt.IsZero() {
		t.Fatalf("EnsureEnv = %+v", e)
	}
	// Again with another URL: updated, CreatedAt kept.
	e2, err := EnsureEnv(ctx, st, "acme", "prod", "https://w.example:8443")
	if err != nil {
		t.Fatal(err)
	}
	if e2.WorkerURL != "https://w.example:8443" || !e2.CreatedAt.Equal(e.CreatedAt) {
		t.Fatalf("second EnsureEnv = %+v, first %+v", e2, e)
	}

	for name, u := range map[string]string{
		"no scheme":   "talkide-worker:8080",
		"ftp":         "ftp://w/",
		"credentials": "http://u:p@w/",
		"query":       "http://w/?a=b",
		"no host":     "http:///x",
	} {
		if _, err := EnsureEnv(ctx, st, "acme", "prod", u); err == nil {
			t.Errorf("%s: worker URL %q accepted", name, u)
		}
	}
	if _, err := EnsureEnv(ctx, st, "Acme", "prod", ""); !errors.Is(err, ErrInvalidName) {
		t.Errorf("bad name: err = %v, want ErrInvalidName", err)
	}

	// "acme-prod"/"x" and "acme"/"prod-x" would share namespace acme-prod-x.
	if _, err := EnsureEnv(ctx, st, "acme-prod", "x", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureEnv(ctx, st, "acme", "prod-x", ""); !errors.Is(err, ErrNamespaceTaken) {
		t.Errorf("colliding namespace: err = %v, want ErrNamespaceTaken", err)
	}
}

func TestIssueAuthenticateRevoke(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

	if _, _, err := IssueIdentityToken(ctx, st, "acme", "prod", 0, now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("issue for a missing env: err = %v, want ErrNotFound", err)
	}
	if _, err := EnsureEnv(ctx, st, "acme", "prod", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := IssueIdentityToken(ctx, st, "acme", "prod", -time.Hour, now); err == nil {
		t.Fatal("negative TTL accepted")
	}
	tok, rec, err := IssueIdentityToken(ctx, st, "acme", "prod", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tenant != "acme" || rec.Env != "prod" || !rec.CreatedAt.Equal(now) || !rec.ExpiresAt.Equal(now.Add(DefaultTokenTTL)) || !rec.RevokedAt.IsZero() {
		t.Fatalf("record = %+v", rec)
	}
	// Stored hashed: the record holds the SHA-256 of the secret only.
	id, hash, err := trust.ParseIdentityToken(tok)
	if err != nil || id != rec.ID || !trust.HashesEqual(hash, rec.Hash) {
		t.Fatalf("token does not match its record: id %s vs %s, err %v", id, rec.ID, err)
	}
	if strings.Contains(fmt.Sprintf("%+v", rec), tok[strings.IndexByte(tok, '.')+1:]) {
		t.Fatal("record contains the token's secret")
	}
	got, err := Authenticate(ctx, st, tok, now.Add(time.Hour))
	if err != nil || got.ID != rec.ID {
		t.Fatalf("Authenticate = %+v, %v", got, err)
	}

	// Rotation: a second token does not revoke the first.
	tok2, rec2, err := IssueIdentityToken(ctx, st, "acme", "prod", time.Hour, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if rec2.ID == rec.ID || tok2 == tok {
		t.Fatal("second token equals the first")
	}
	for _, tk := range []string{tok, tok2} {
		if _, err := Authenticate(ctx, st, tk, now.Add(2*time.Minute)); err != nil {
			t.Fatalf("during the grace period a token fails: %v", err)
		}
	}
	// Then the old one is revoked explicitly.
	revokedAt := now.Add(10 * time.Minute)
	r, err := RevokeIdentityToken(ctx, st, rec.ID, revokedAt)
	if err != nil || !r.RevokedAt.Equal(revokedAt) {
		t.Fatalf("Revoke = %+v, %v", r, err)
	}
	if _, err := Authenticate(ctx, st, tok, revokedAt); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("revoked token: err = %v, want ErrInvalidToken", err)
	}
	if _, err := Authenticate(ctx, st, tok2, revokedAt); err != nil {
		t.Fatalf("new token after revoking the old: %v", err)
	}
	// Revoking again keeps the first time.
	r, err = RevokeIdentityToken(ctx, st, rec.ID, revokedAt.Add(time.Hour))
	if err != nil || !r.RevokedAt.Equal(revokedAt) {
		t.Fatalf("second revoke = %+v, %v", r, err)
	}
	// The short-lived one expires.
	if _, err := Authenticate(ctx, st, tok2, now.Add(time.Minute+time.Hour)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("expired token: err = %v, want ErrInvalidToken", err)
	}

	if _, err := RevokeIdentityToken(ctx, st, "nosuchid", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoke unknown id: err = %v, want ErrNotFound", err)
	}
	// A whole token given as an id is refused without being echoed.
	_, err = RevokeIdentityToken(ctx, st, tok2, now)
	if err == nil || strings.Contains(err.Error(), tok2[strings.IndexByte(tok2, '.')+1:]) {
		t.Errorf("revoke with a whole token: err = %v", err)
	}
}

func TestAuthenticateRejects(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	now := time.Now()
	if _, err := EnsureEnv(ctx, st, "acme", "prod", ""); err != nil {
		t.Fatal(err)
	}
	tok, _, err := IssueIdentityToken(ctx, st, "acme", "prod", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	other := trust.NewIdentityToken()
	id, _, _ := trust.ParseIdentityToken(tok)
	tests := map[string]string{
		"empty":        "",
		"garbage":      "hello",
		"unknown id":   other.Token,
		"wrong secret": "tki_" + id + "." + other.Token[strings.IndexByte(other.Token, '.')+1:],
	}
	for name, tk := range tests {
		_, err := Authenticate(ctx, st, tk, now)
		if !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: err = %v, want ErrInvalidToken", name, err)
		}
		if sec := tk[strings.IndexByte(tk, '.')+1:]; len(sec) > 8 && err != nil && strings.Contains(err.Error(), sec) {
			t.Errorf("%s: error contains the secret", name)
		}
	}
}

// TestIdentityTokenIssuedBefore: a token as a store holds it from before the
// token code was shared (its id, and the SHA-256 of its secret computed
// outside Go) still authenticates, and a store failure is not the token's.
func TestIdentityTokenIssuedBefore(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if _, err := EnsureEnv(ctx, st, "acme", "prod", ""); err != nil {
		t.Fatal(err)
	}
	const token = "tki_Xy3kP0qRsT1u.Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg"
	hash, _ := hex.DecodeString("eb61961ac2bddb064bcd491f1926db0a25ba4de9d5d4ed450011bba77844787c")
	rec := store.IdentityToken{ID: "Xy3kP0qRsT1u", Tenant: "acme", Env: "prod", Hash: [32]byte(hash), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.AddIdentityToken(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if got, err := Authenticate(ctx, st, token, now); err != nil || got.ID != rec.ID || got.Env != "prod" {
		t.Fatalf("Authenticate = %+v, %v", got, err)
	}
	st.Close()
	if _, err := Authenticate(ctx, st, token, now); err == nil || errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Authenticate on a closed store = %v, want a store error", err)
	}
}

func TestWorkerSecret(t *testing.T) {
	master := bytes.Repeat([]byte{7}, 32)
	tok := trust.NewIdentityToken()
	ws := NewWorkerSecret(master, "c1", "acme", "prod", tok.Token)
	if ws.Namespace != "acme-prod" || ws.IdentityTokenID != tok.ID || ws.CommandKeyID != "c1" {
		t.Fatalf("secret = %v", ws)
	}
	if !bytes.Equal(ws.CommandKey, trust.DeriveEnvKey(master, "acme", "prod")) {
		t.Fatal("command key is not DeriveEnvKey(master, tenant, env)")
	}

	// JSON: a Secret manifest whose data decode to the file contents.
	var m struct {
		APIVersion, Kind, Type string
		Metadata               struct{ Name, Namespace string }
		Data                   map[string]string
	}
	if err := json.Unmarshal(ws.JSON(), &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "v1" || m.Kind != "Secret" || m.Type != "Opaque" || m.Metadata.Name != SecretName || m.Metadata.Namespace != "acme-prod" {
		t.Fatalf("manifest header = %+v", m)
	}
	decoded := map[string]string{}
	for k, v := range m.Data {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			t.Fatalf("data %s: %v", k, err)
		}
		decoded[k] = string(b)
	}
	want := map[string]string{
		KeyIdentityToken: tok.Token,
		KeyCommandKey:    "c1:" + base64.StdEncoding.EncodeToString(trust.DeriveEnvKey(master, "acme", "prod")),
		KeyCommandKeyID:  "c1",
	}
	if diff := cmp.Diff(want, decoded); diff != "" {
		t.Errorf("secret data (-want +got):\n%s", diff)
	}

	// Redaction everywhere but the renderers.
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "secret", ws)
	for name, s := range map[string]string{
		"%v": fmt.Sprintf("%v", ws), "%+v": fmt.Sprintf("%+v", ws), "%#v": fmt.Sprintf("%#v", ws),
		"%s": fmt.Sprint(ws), "slog": logs.String(),
	} {
		if strings.Contains(s, tok.Token) || strings.Contains(s, want[KeyCommandKey]) {
			t.Errorf("%s shows a secret: %s", name, s)
		}
	}
}

func TestWorkerSecretYAMLGolden(t *testing.T) {
	// Fixed inputs: a made-up token and master secret.
	ws := NewWorkerSecret(bytes.Repeat([]byte{1}, 32), "c1", "acme", "prod", "tki_AAAAAAAAAAAA.BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB")
	ws.ExpiresAt = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	goldenfile.Check(t, filepath.Join("testdata", "worker-secret.yaml"), ws.YAML(), *update, "YAML")
}
