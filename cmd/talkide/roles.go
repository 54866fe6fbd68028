package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// runControlPlane runs the control-plane alone.
func runControlPlane(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o cpOptions
	var dataDir string
	fs.StringVar(&o.listen, "listen", "127.0.0.1:7878", "HOST:PORT to serve on")
	fs.StringVar(&dataDir, "data-dir", "./.talkide-cp", "directory for the secrets file and the default SQLite database")
	fs.StringVar(&o.database, "database", "", "the store: a postgres://… or postgresql://… URL (password better in PGPASSWORD or ~/.pgpass), or sqlite:PATH or a file path (default DATA-DIR/controlplane.db)")
	fs.StringVar(&o.upstream, "anthropic-url", "https://api.anthropic.com", "Anthropic API base URL")
	fs.StringVar(&o.localUser, "local-user", "", "serve the browser API as this one user without credentials (loopback only)")
	fs.StringVar(&o.tenant, "default-tenant", "local", "tenant of new conversations")
	fs.StringVar(&o.env, "default-env", "dev", "env of new conversations")
	fs.StringVar(&o.prices, "prices", "", "JSON file of model prices overriding the built-in list, same shape (docs/budgets.md)")
	fs.StringVar(&o.operatorTokens, "operator-tokens", "", "file of the operator tokens' hashes that the operator API /api/admin accepts, re-read when it changes (default DATA-DIR/operator-tokens; kept by talkide admin operator-token)")
	logger, err := parseWithLogger(fs, args, stderr)
	if err != nil {
		return err
	}
	if o.localUser != "" && !isLoopback(o.listen) {
		return fmt.Errorf("--local-user needs a loopback --listen address")
	}
	o.logger = logger
	o.apiKey = os.Getenv("ANTHROPIC_API_KEY")
	if o.apiKey == "" {
		logger.Warn("ANTHROPIC_API_KEY is not set: the gateway answers 503")
	}
	o.dbPath = filepath.Join(dataDir, "controlplane.db")
	o.secretsPath = filepath.Join(dataDir, "controlplane-secrets.json")
	cp, err := startControlPlane(ctx, o)
	if err != nil {
		return err
	}
	logger.Info("control-plane serving", "url", cp.http.url())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return cp.shutdown(sctx)
}

// runWorker runs an agent worker. Its secrets come from the environment or
// from files mounted from the Kubernetes Secret talkide-worker-token.
func runWorker(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o workerOptions
	var tokenFile, keyFile string
	fs.StringVar(&o.listen, "listen", ":8080", "HOST:PORT to serve the command API on")
	fs.StringVar(&o.tenant, "tenant", "", "tenant this worker serves (required)")
	fs.StringVar(&o.env, "env", "", "env this worker serves (required)")
	fs.StringVar(&tokenFile, "identity-token-file", "", "file holding the identity token, re-read on every mint (default: $TALKIDE_WORKER_IDENTITY_TOKEN)")
	fs.StringVar(&keyFile, "command-key-file", "", "file holding the base64 command signing key (default: $TALKIDE_WORKER_COMMAND_KEY)")
	fs.StringVar(&o.commandKeyID, "command-key-id", "c1", "id of the command signing key")
	fs.StringVar(&o.workspaceRoot, "workspaces", "", "directory of the conversations' workspaces (default: $CLAUDE_CONFIG_DIR/../workspaces)")
	registerAgentFlags(fs, &o.model, &o.harness, &o.claudeCodeBin, &o.toolPolicy, &o.mcpAllow)
	logger, err := parseWithLogger(fs, args, stderr)
	if err != nil {
		return err
	}
	o.logger = logger
	if o.tenant == "" || o.env == "" {
		return errors.New("--tenant and --env are required")
	}
	if os.Getenv("ANTHROPIC_API_KEY") != "" {
		return errors.New("ANTHROPIC_API_KEY is set in the worker's environment; the worker must never hold it (remove it)")
	}
	o.cpURL = os.Getenv("TALKIDE_GATEWAY_BASE_URL")
	if o.cpURL == "" {
		return errors.New("TALKIDE_GATEWAY_BASE_URL (the control-plane's base URL) is required")
	}
	o.claudeConfigDir = os.Getenv("CLAUDE_CONFIG_DIR")
	if o.claudeConfigDir == "" {
		return errors.New("CLAUDE_CONFIG_DIR (the session volume) is required")
	}
	if o.workspaceRoot == "" {
		o.workspaceRoot = filepath.Join(filepath.Dir(filepath.Clean(o.claudeConfigDir)), "workspaces")
	}
	switch {
	case tokenFile != "":
		o.identity = identityFromFile(tokenFile)
	case os.Getenv("TALKIDE_WORKER_IDENTITY_TOKEN") != "":
		tok := os.Getenv("TALKIDE_WORKER_IDENTITY_TOKEN")
		o.identity = func() (string, error) { return tok, nil }
	default:
		return errors.New("an identity token is required: --identity-token-file or TALKIDE_WORKER_IDENTITY_TOKEN")
	}
	keyText := os.Getenv("TALKIDE_WORKER_COMMAND_KEY")
	if keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return err
		}
		keyText = string(b)
	}
	if o.commandKey, err = base64.StdEncoding.DecodeString(strings.TrimSpace(keyText)); err != nil || len(o.commandKey) < 32 {
		return errors.New("a base64 command key of at least 32 bytes is required: --command-key-file or TALKIDE_WORKER_COMMAND_KEY")
	}
	// Nothing the agent runs may inherit the worker's secrets.
	os.Unsetenv("TALKIDE_WORKER_IDENTITY_TOKEN")
	os.Unsetenv("TALKIDE_WORKER_COMMAND_KEY")
	w, err := startWorker(o)
	if err != nil {
		return err
	}
	logger.Info("worker serving", "url", w.http.url(), "localproxy", w.localProxy.URL(), "tenant", o.tenant, "env", o.env)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return w.shutdown(sctx)
}
