package roles

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/trust"
)

func TestWorkerFromEnv(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(trust.NewKey())
	good := WorkerEnv{GatewayBaseURL: "http://cp:7878", ClaudeConfigDir: "/data/claude/", IdentityToken: "tki_a.secret", CommandKey: "c7:" + key}
	flags := func() WorkerConfig {
		return WorkerConfig{Tenant: "acme", Env: "prod", CommandKeyID: "c1", CommandKeyGrace: time.Minute}
	}

	o := flags()
	if err := o.FromEnv(good); err != nil {
		t.Fatal(err)
	}
	if o.ControlPlaneURL != "http://cp:7878" || o.ClaudeConfigDir != "/data/claude/" || o.WorkspaceRoot != "/data/workspaces" ||
		o.IdentityToken != "tki_a.secret" || o.CommandKey.ID != "c7" {
		t.Errorf("completed: %+v", o)
	}
	// Files the flags name win over the environment's secrets; a bare key
	// takes --command-key-id.
	o = flags()
	o.IdentityTokenFile, o.WorkspaceRoot = "/secret/identity-token", "/ws"
	bare := good
	bare.CommandKey = key
	if err := o.FromEnv(bare); err != nil {
		t.Fatal(err)
	}
	if o.IdentityToken != "" || o.WorkspaceRoot != "/ws" || o.CommandKey.ID != "c1" {
		t.Errorf("with files: %+v", o)
	}

	tests := map[string]struct {
		flags func(*WorkerConfig)
		env   func(*WorkerEnv)
		want  string
	}{
		"no tenant":      {func(o *WorkerConfig) { o.Tenant = "" }, nil, "--tenant and --env are required"},
		"the API key":    {nil, func(e *WorkerEnv) { e.HasAPIKey = true }, "must never hold it"},
		"no gateway":     {nil, func(e *WorkerEnv) { e.GatewayBaseURL = "" }, "TALKIDE_GATEWAY_BASE_URL"},
		"no volume":      {nil, func(e *WorkerEnv) { e.ClaudeConfigDir = "" }, "CLAUDE_CONFIG_DIR"},
		"no grace":       {func(o *WorkerConfig) { o.CommandKeyGrace = 0 }, nil, "--command-key-grace"},
		"no command key": {nil, func(e *WorkerEnv) { e.CommandKey = "" }, trust.ErrNoCommandKey.Error()},
		"a bad key":      {nil, func(e *WorkerEnv) { e.CommandKey = "c1:not-base64-" + key }, trust.ErrNoCommandKey.Error()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, env := flags(), good
			if tc.flags != nil {
				tc.flags(&o)
			}
			if tc.env != nil {
				tc.env(&env)
			}
			err := o.FromEnv(env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("FromEnv = %v, want an error saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "tki_a.secret") {
				t.Errorf("the error shows a secret: %v", err)
			}
		})
	}
}

// TestLocalUserOnlyOnLoopback: the user served without credentials is
// refused on an address others reach, before anything starts.
func TestLocalUserOnlyOnLoopback(t *testing.T) {
	_, err := StartControlPlane(t.Context(), ControlPlaneConfig{Listen: "0.0.0.0:0", LocalUser: "local", SecretsPath: t.TempDir() + "/s.json"})
	var fe *contract.FieldError
	if !errors.As(err, &fe) || fe.Field != "local-user" {
		t.Fatalf("StartControlPlane = %v, want a local-user field error", err)
	}
}

// --sandbox-cpus is no ceiling (0) or a number of CPUs a cpu cgroup can
// hold; anything else names the flag.
func TestAgentSandboxCPUs(t *testing.T) {
	for _, ok := range []float64{0, 0.01, 1.5, 64} {
		if err := (&AgentConfig{SandboxCPUs: ok}).Check(); err != nil {
			t.Errorf("--sandbox-cpus %g: %v", ok, err)
		}
	}
	for _, bad := range []float64{-1, 0.001, 2000} {
		err := (&AgentConfig{SandboxCPUs: bad}).Check()
		if fe := (*contract.FieldError)(nil); !errors.As(err, &fe) || fe.Field != "sandbox-cpus" {
			t.Errorf("--sandbox-cpus %g: %v, want an error naming the flag", bad, err)
		}
	}
}
