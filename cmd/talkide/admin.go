package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/store"
)

const adminUsage = `usage: talkide admin <command> [flags]

commands:
  env add       --tenant T --env E --worker-url URL
                create a tenant-env, or set the worker URL of an existing one
  env list      list the tenant-envs
  token issue   --tenant T --env E [--ttl 2160h] [--output secret-yaml|json|token]
                issue an identity token and print the worker's Secret
                talkide-worker-token (the only time the token is shown)
  token revoke  --id ID
                revoke an identity token (the end of a rotation's grace period)

  budget set     (--user U | --tenant T [--env E]) --kind K --amount A [--hard]
                 set a limit; K: daily, weekly, monthly, rolling-5h (dollars),
                 rpm, tokens-per-day, concurrency
  budget get     [--user U | --tenant T [--env E]]   list limits (all without a subject)
  budget delete  (--user U | --tenant T [--env E]) --kind K
  budget status  (--user U | --tenant T [--env E])
                 used, held and remaining of each limit, and when it resets
  usage          [--by user|tenant|env|conversation|model|day[,…]] [--from D] [--to D]
                 [--user U] [--tenant T] [--env E] [--conversation C] [--model M]
                 usage and cost from the budget ledger, as a table

  operator-token issue  [--name N]   issue a token for the operator API (/api/admin)
  operator-token list
  operator-token revoke --id ID

Every command works on the control-plane's database and secrets: --data-dir DIR
(default ./.talkide-cp, holding controlplane.db and controlplane-secrets.json)
and --database URL, as "talkide controlplane" takes them. See docs/operations.md.
Run "talkide admin <command> -h" for a command's flags.
`

// runAdmin runs one operator command against the control-plane's store.
func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) >= 1 && args[0] == "usage" {
		return adminUsageReport(ctx, args[1:], stdout, stderr)
	}
	if len(args) < 2 {
		fmt.Fprint(stderr, adminUsage)
		return flag.ErrHelp
	}
	cmd, rest := args[0]+" "+args[1], args[2:]
	switch cmd {
	case "budget set":
		return adminBudgetSet(ctx, rest, stdout, stderr)
	case "budget get":
		return adminBudgetGet(ctx, rest, stdout, stderr)
	case "budget delete":
		return adminBudgetDelete(ctx, rest, stdout, stderr)
	case "budget status":
		return adminBudgetStatus(ctx, rest, stdout, stderr)
	case "operator-token issue":
		return adminOperatorIssue(ctx, rest, stdout, stderr)
	case "operator-token list":
		return adminOperatorList(ctx, rest, stdout, stderr)
	case "operator-token revoke":
		return adminOperatorRevoke(ctx, rest, stdout, stderr)
	case "env add":
		return adminEnvAdd(ctx, rest, stdout, stderr)
	case "env list":
		return adminEnvList(ctx, rest, stdout, stderr)
	case "token issue":
		return adminTokenIssue(ctx, rest, stdout, stderr)
	case "token revoke":
		return adminTokenRevoke(ctx, rest, stdout, stderr)
	}
	fmt.Fprint(stderr, adminUsage)
	return fmt.Errorf("unknown command %q", cmd)
}

// cpLocation is where the control-plane keeps its state: the same flags as
// talkide controlplane.
type cpLocation struct {
	dataDir  string
	database string
}

func (l *cpLocation) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&l.dataDir, "data-dir", "./.talkide-cp", "the control-plane's data directory (its secrets file and default SQLite database)")
	fs.StringVar(&l.database, "database", "", "the control-plane's store, as for talkide controlplane: postgres://… URL, sqlite:PATH or a file path (default DATA-DIR/controlplane.db)")
}

// open opens the control-plane's store. An admin command never creates a
// SQLite database: a missing one means a wrong --data-dir, and tokens
// issued into a fresh database would be worthless.
func (l *cpLocation) open(ctx context.Context, stderr io.Writer) (store.Store, error) {
	def := filepath.Join(l.dataDir, "controlplane.db")
	if path, ok := sqliteFile(l.database, def); ok {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("no control-plane database at %s (start talkide controlplane with this --data-dir once, or pass --data-dir / --database): %w", path, err)
		}
	}
	// Migrations are logged (the only lines the stores log).
	return openStore(ctx, l.database, def, slog.New(slog.NewTextHandler(stderr, nil)))
}

// sqliteFile returns the SQLite file openStore would open for spec, and
// false for PostgreSQL (or a spec openStore refuses).
func sqliteFile(spec, def string) (string, bool) {
	scheme, rest, isURL := strings.Cut(spec, "://")
	switch {
	case spec == "":
		return def, true
	case isURL && strings.EqualFold(scheme, "sqlite"):
		return rest, true
	case isURL:
		return "", false
	}
	return strings.TrimPrefix(spec, "sqlite:"), true
}

// secrets loads the control-plane's secrets file, which must exist: keys
// made up here would not be the running control-plane's.
func (l *cpLocation) secrets() (*cpSecrets, error) {
	path := filepath.Join(l.dataDir, "controlplane-secrets.json")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no control-plane secrets at %s (start talkide controlplane with this --data-dir once, or pass the right --data-dir): %w", path, err)
	}
	return loadOrCreateSecrets(path)
}

func newAdminFlags(name string, stderr io.Writer, loc *cpLocation) *flag.FlagSet {
	fs := flag.NewFlagSet("admin "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	loc.addFlags(fs)
	return fs
}

// parseAdmin parses args and refuses positional arguments (a flag after a
// stray word would otherwise be silently ignored).
func parseAdmin(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	return nil
}

func adminEnvAdd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var loc cpLocation
	var tenant, env, workerURL string
	fs := newAdminFlags("env add", stderr, &loc)
	fs.StringVar(&tenant, "tenant", "", "tenant (required): lowercase letters, digits, '-'")
	fs.StringVar(&env, "env", "", "env (required): lowercase letters, digits, '-'")
	fs.StringVar(&workerURL, "worker-url", "", "base URL of the tenant-env's worker (required), e.g. http://talkide-worker.TENANT-ENV.svc:8080")
	if err := parseAdmin(fs, args); err != nil {
		return err
	}
	if tenant == "" || env == "" || workerURL == "" {
		return errors.New("--tenant, --env and --worker-url are required")
	}
	st, err := loc.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	e, err := provision.EnsureEnv(ctx, st, tenant, env, workerURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "tenant-env %s/%s (namespace %s), worker %s, created %s\n",
		e.Tenant, e.Name, provision.Namespace(e.Tenant, e.Name), e.WorkerURL, formatTime(e.CreatedAt))
	fmt.Fprintf(stdout, "next: talkide admin token issue --tenant %s --env %s | kubectl apply -f -\n", e.Tenant, e.Name)
	return nil
}

func adminEnvList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var loc cpLocation
	fs := newAdminFlags("env list", stderr, &loc)
	if err := parseAdmin(fs, args); err != nil {
		return err
	}
	st, err := loc.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	envs, err := st.ListEnvs(ctx)
	if err != nil {
		return err
	}
	if len(envs) == 0 {
		fmt.Fprintln(stdout, "no tenant-envs (add one: talkide admin env add --tenant T --env E --worker-url URL)")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tENV\tNAMESPACE\tWORKER URL\tCREATED")
	for _, e := range envs {
		u := e.WorkerURL
		if u == "" {
			u = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Tenant, e.Name, provision.Namespace(e.Tenant, e.Name), u, formatTime(e.CreatedAt))
	}
	return tw.Flush()
}

func adminTokenIssue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var loc cpLocation
	var tenant, env, output string
	var ttl time.Duration
	fs := newAdminFlags("token issue", stderr, &loc)
	fs.StringVar(&tenant, "tenant", "", "tenant (required)")
	fs.StringVar(&env, "env", "", "env (required)")
	fs.DurationVar(&ttl, "ttl", provision.DefaultTokenTTL, "lifetime of the identity token")
	fs.StringVar(&output, "output", "secret-yaml", "what to print: secret-yaml or json (the Secret talkide-worker-token as a Kubernetes manifest), or token (the identity token alone)")
	if err := parseAdmin(fs, args); err != nil {
		return err
	}
	if tenant == "" || env == "" {
		return errors.New("--tenant and --env are required")
	}
	if output != "secret-yaml" && output != "json" && output != "token" {
		return fmt.Errorf("--output %q: want secret-yaml, json or token", output)
	}
	if ttl <= 0 {
		return fmt.Errorf("--ttl %s: want a positive duration", ttl)
	}
	// Both before issuing: a token is never issued that cannot be printed.
	secrets, err := loc.secrets()
	if err != nil {
		return err
	}
	st, err := loc.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	token, rec, err := provision.IssueIdentityToken(ctx, st, tenant, env, ttl, time.Now())
	if err != nil {
		return err
	}
	ws := provision.NewWorkerSecret(secrets.CommandSecret, secrets.CommandKeyID, tenant, env, token)
	ws.ExpiresAt = rec.ExpiresAt
	switch output {
	case "secret-yaml":
		_, err = stdout.Write(ws.YAML())
	case "json":
		_, err = stdout.Write(ws.JSON())
	case "token":
		_, err = fmt.Fprintln(stdout, token)
	}
	if err != nil {
		return err
	}
	// The note goes to stderr, so stdout can be piped to kubectl.
	fmt.Fprintf(stderr, "issued identity token %s for %s/%s, valid until %s; it is shown only this once.\n"+
		"Earlier tokens of %s/%s stay valid: once the worker uses this one, revoke the old one with\n"+
		"  talkide admin token revoke --id OLD-ID   (the id is the Secret's annotation %s)\n",
		rec.ID, tenant, env, formatTime(rec.ExpiresAt), tenant, env, "talkide/identity-token-id")
	return nil
}

func adminTokenRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var loc cpLocation
	var id string
	fs := newAdminFlags("token revoke", stderr, &loc)
	fs.StringVar(&id, "id", "", "id of the identity token to revoke (required; the Secret's talkide/identity-token-id annotation)")
	if err := parseAdmin(fs, args); err != nil {
		return err
	}
	if id == "" {
		return errors.New("--id is required")
	}
	st, err := loc.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec, err := provision.RevokeIdentityToken(ctx, st, id, now)
	if err != nil {
		return err
	}
	switch {
	case rec.RevokedAt.Before(now):
		fmt.Fprintf(stdout, "identity token %s of %s/%s was already revoked at %s\n", rec.ID, rec.Tenant, rec.Env, formatTime(rec.RevokedAt))
		return nil
	case rec.RevokedAt.After(now):
		// The store keeps a token's first revocation time.
		return fmt.Errorf("identity token %s of %s/%s is already set to be revoked at %s, which the store does not bring forward", rec.ID, rec.Tenant, rec.Env, formatTime(rec.RevokedAt))
	}
	fmt.Fprintf(stdout, "revoked identity token %s of %s/%s at %s\n", rec.ID, rec.Tenant, rec.Env, formatTime(rec.RevokedAt))
	return nil
}

// formatTime shows a time in UTC to the second; "-" for none.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
