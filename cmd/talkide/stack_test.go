package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/syncbuf"
	"github.com/talkide/platform/internal/trust"
)

// The stacks the tests of this package run: talkide dev's whole stack, or
// a control-plane and workers started one by one, each through
// internal/roles as the commands start them, and each stopped when its
// test ends.

// failureLogs is a log sink whose contents the test prints if it fails.
func failureLogs(t testing.TB) *syncbuf.Buffer {
	logs := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	return logs
}

// debugLogger logs everything, as text, to w: what a failing test prints.
func debugLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// stackStopWithin bounds a stack's shutdown at the end of a test; running
// turns, Claude Code processes and sandboxes all have to go within it.
const stackStopWithin = 20 * time.Second

// stopAtEnd stops a part of a stack when the test ends. A test that checks
// how something stops calls its Stop itself first: a second Stop does
// nothing.
func stopAtEnd(t testing.TB, stop func(context.Context) error) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stackStopWithin)
		defer cancel()
		if err := stop(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
}

// startTestStack runs talkide dev's stack in a temporary directory with the
// model simulator, logging at debug level into the returned buffer.
func startTestStack(t testing.TB) (*roles.Dev, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	st := startDevT(t, roles.DevConfig{
		DataDir: t.TempDir(),
		Addr:    "127.0.0.1:0",
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	return st, logs
}

// startDevT runs talkide dev's stack as cfg says and shuts it down when
// the test ends. A cfg without a data directory or an address gets a
// temporary directory and a loopback port, and one without a logger logs
// nothing.
func startDevT(t testing.TB, cfg roles.DevConfig) *roles.Dev {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return startT(t, roles.StartDev, cfg)
}

// startT starts a part of the platform with its roles.Start function and
// stops it when the test ends.
func startT[C any, P interface{ Stop(context.Context) error }](t testing.TB, start func(context.Context, C) (P, error), cfg C) P {
	t.Helper()
	p, err := start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	stopAtEnd(t, p.Stop)
	return p
}

// startSimulator serves the model simulator, with a key of its own, until
// the test ends.
func startSimulator(t testing.TB) (url, key string) {
	key = fmt.Sprintf("sk-sim-%x", trust.NewKey())
	sim := httptest.NewServer(anthropicsim.New(key, nil))
	t.Cleanup(sim.Close)
	return sim.URL, key
}

// startDevControlPlane starts a control-plane of dev's tenant and env on
// the model simulator, for workers the test starts itself. It returns the
// control-plane, the new directory that holds its database and secrets,
// and the logger, which shows the debug logs of the processes the test
// starts if it fails.
func startDevControlPlane(t testing.TB) (cp *roles.ControlPlane, dir string, logger *slog.Logger) {
	t.Helper()
	dir = t.TempDir()
	logger = debugLogger(failureLogs(t))
	upstream, key := startSimulator(t)
	return startT(t, roles.StartControlPlane, roles.ControlPlaneConfig{
		Listen: "127.0.0.1:0", DBPath: filepath.Join(dir, "controlplane.db"), SecretsPath: filepath.Join(dir, "secrets.json"),
		Upstream: upstream, APIKey: key, LocalUser: roles.DevUser, Tenant: roles.DevTenant, Env: roles.DevEnv,
		Logger: logger.With("proc", "controlplane"),
	}), dir, logger
}

// devIdentityToken issues the identity token of dev's env into dir, as
// talkide dev does for its worker, and returns its path.
func devIdentityToken(t testing.TB, st store.Store, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "identity-token")
	if err := roles.EnsureIdentityToken(context.Background(), st, path, roles.DevTenant, roles.DevEnv); err != nil {
		t.Fatal(err)
	}
	return path
}

// devCommandKey is the key a control-plane with these secrets signs the
// commands to dev env's worker with.
func devCommandKey(s *trust.Secrets) trust.Key {
	return trust.Key{ID: s.CommandKeyID, Secret: trust.DeriveEnvKey(s.CommandSecret, roles.DevTenant, roles.DevEnv)}
}

// devWorkerConfig is a worker of dev's env with its Claude configuration
// and workspaces in dir, as talkide dev lays them out: the workers of one
// test share them, as the pods of a deployment share their volume.
func devWorkerConfig(id, dir, controlPlane, identityToken string, secrets *trust.Secrets, logger *slog.Logger) roles.WorkerConfig {
	return roles.WorkerConfig{
		Listen: "127.0.0.1:0", Tenant: roles.DevTenant, Env: roles.DevEnv, ControlPlaneURL: controlPlane,
		IdentityTokenFile: identityToken, CommandKey: devCommandKey(secrets),
		ClaudeConfigDir: filepath.Join(dir, "claude"), WorkspaceRoot: filepath.Join(dir, "workspaces"),
		WorkerID: id, Logger: logger.With("proc", id),
	}
}

// newCommandClient signs commands to the worker at url with k, as the
// control-plane does for dev's env.
func newCommandClient(name, url string, k trust.Key) *commandClient {
	return &commandClient{name: name, url: url, signer: &trust.Signer{
		Direction: trust.ToWorker, Tenant: roles.DevTenant, Env: roles.DevEnv, KeyID: k.ID, Key: k.Secret}}
}

// knownConversations stores dev's user and these conversations of it, as
// the browser API does before it sends a worker the first command, so that
// a worker driven directly may mint for them and report on them.
func knownConversations(t testing.TB, st store.Store, ids ...string) {
	t.Helper()
	ctx := context.Background()
	if err := st.PutUser(ctx, store.User{ID: roles.DevUser, Name: roles.DevUser, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, _, err := st.CreateConversation(ctx, store.Conversation{ID: id, Tenant: roles.DevTenant, Env: roles.DevEnv, UserID: roles.DevUser, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
}

// goBuild builds the package pkg, a path from this directory, into out,
// with env added to this process's environment.
func goBuild(t testing.TB, out, pkg string, env ...string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// echoServerAllowed builds the echo MCP server into dir and writes
// dir/mcp-allow.json, an operator's allow-list that permits it as name:
// it returns the server's path and the allow-list's.
func echoServerAllowed(t testing.TB, dir, name string) (bin, allow string) {
	t.Helper()
	bin = filepath.Join(dir, "echoserver")
	goBuild(t, bin, "../../internal/mcp/servers/testdata/echoserver")
	allow = filepath.Join(dir, "mcp-allow.json")
	list := fmt.Sprintf(`{"stdio": [{"name": %q, "command": %q}]}`, name, bin)
	if err := os.WriteFile(allow, []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	return bin, allow
}
