// Package admincmd is the operators' command trees of talkide, `talkide
// admin …` and `talkide sessions …`: flags and output over the
// control-plane's store and secrets and a worker's session volume, worked
// on directly, no running control-plane needed.
package admincmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/provision"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// New returns the `admin` tree, which reads from and writes to std.
func New(std cli.Stdio) *cobra.Command {
	admin := cli.NewGroup("admin", "Operate the control-plane: tenant-envs, identity tokens, signing keys, users, API tokens, budgets, usage, the build cache, operator tokens",
		cli.NewGroup("env", "Tenant-envs: the environments whose workers the control-plane serves",
			newAdminEnvAddCmd(std), newAdminEnvListCmd(std),
			newAdminEnvSyncCmd(std), newAdminEnvStatusCmd(std), newAdminEnvScaleCmd(std), newAdminEnvDeleteCmd(std)),
		cli.NewGroup("token", "Identity tokens: a worker's long-lived credential for minting WorkerTokens",
			newAdminTokenIssueCmd(std), newAdminTokenRevokeCmd(std), newAdminTokenRotateCmd(std)),
		newAdminKeysCmd(std),
		newAdminUserCmd(std), newAdminAPITokenCmd(std),
		cli.NewGroup("budget", "Spending, token, request and concurrency limits of users, tenants and tenant-envs",
			newAdminBudgetSetCmd(std), newAdminBudgetGetCmd(std), newAdminBudgetDeleteCmd(std), newAdminBudgetStatusCmd(std)),
		newAdminUsageReportCmd(std),
		newAdminBuildCacheCmd(std),
		newAdminTraceCmd(std),
		cli.NewGroup("operator-token", "Tokens of the operator API (/api/admin)",
			newAdminOperatorIssueCmd(std), newAdminOperatorListCmd(std), newAdminOperatorRevokeCmd(std)),
	)
	admin.Long = `Operate the control-plane. Every command works on the control-plane's database
and secrets directly (no running control-plane is needed): --data-dir DIR, holding
controlplane.db and controlplane-secrets.json, and --database URL, as talkide
controlplane takes them. Without --data-dir (or $TALKIDE_DATA_DIR) it uses
` + DefaultControlPlaneDataDir + ` (talkide controlplane's default) or, when only talkide dev's
exists, ` + defaultDevDataDir + `. See docs/operations.md.`
	return admin
}

// adminLeaf returns an admin command that takes the location flags and
// runs body with the process's output.
func adminLeaf(std cli.Stdio, use, short string, loc *cpLocation, body func(ctx context.Context, stdout, stderr io.Writer) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loc.resolve(); err != nil {
				return err
			}
			ctx, _, stop := cli.UntilSignal(cmd.Context(), std.Signals)
			defer stop()
			return body(ctx, std.Out, std.Err)
		},
	}
	loc.addFlags(cmd.Flags())
	return cmd
}

// Where the control-plane keeps its state by default: talkide
// controlplane's data directory, and talkide dev's, which holds the same
// files (controlplane.db, controlplane-secrets.json) at its top.
const (
	DefaultControlPlaneDataDir = "./.talkide-cp"
	defaultDevDataDir          = "./.talkide"
)

// cpLocation is where the control-plane keeps its state: the same flags as
// talkide controlplane.
type cpLocation struct {
	dataDir  string
	database string
}

func (l *cpLocation) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&l.dataDir, "data-dir", "", "the control-plane's data directory, its secrets file and default SQLite database (default "+DefaultControlPlaneDataDir+", or "+defaultDevDataDir+" when only talkide dev's exists)")
	fs.StringVar(&l.database, "database", "", "the control-plane's store, as for talkide controlplane: postgres://… URL, sqlite:PATH or a file path (default DATA-DIR/controlplane.db)")
	cli.BindEnv(fs, "data-dir", "database")
}

// resolve picks the data directory when none was given: the
// control-plane's default if it holds a control-plane's state, else talkide
// dev's if that does, else the control-plane's (whose absence the command
// then reports, naming both).
func (l *cpLocation) resolve() error {
	if l.dataDir != "" {
		return nil
	}
	l.dataDir = DefaultControlPlaneDataDir
	for _, d := range []string{DefaultControlPlaneDataDir, defaultDevDataDir} {
		if isCPDataDir(d) {
			l.dataDir = d
			return nil
		}
	}
	return nil
}

// isCPDataDir reports whether dir holds a control-plane's state.
func isCPDataDir(dir string) bool {
	_, err := os.Stat(roles.ControlPlaneDir(dir).Secrets())
	return err == nil
}

// missingHint says where else to look when the data directory is wrong.
func (l *cpLocation) missingHint() string {
	return fmt.Sprintf("pass --data-dir DIR: talkide controlplane's directory (default %s) or talkide dev's (default %s)", DefaultControlPlaneDataDir, defaultDevDataDir)
}

// open opens the control-plane's store. An admin command never creates a
// SQLite database: a missing one means a wrong --data-dir, and tokens
// issued into a fresh database would be worthless.
func (l *cpLocation) open(ctx context.Context, stderr io.Writer) (store.Store, error) {
	def := roles.ControlPlaneDir(l.dataDir).Database()
	db, err := roles.ParseDatabase(l.database, def)
	if err != nil {
		return nil, err
	}
	if db.SQLitePath != "" {
		if _, err := os.Stat(db.SQLitePath); err != nil {
			return nil, fmt.Errorf("no control-plane database at %s (%s; or --database): %w", db.SQLitePath, l.missingHint(), err)
		}
	}
	// Migrations are logged (the only lines the stores log).
	return roles.OpenStore(ctx, l.database, def, slog.New(slog.NewTextHandler(stderr, nil)))
}

// secrets loads the control-plane's secrets file, which must exist: keys
// made up here would not be the running control-plane's.
func (l *cpLocation) secrets() (*trust.Secrets, error) {
	path := roles.ControlPlaneDir(l.dataDir).Secrets()
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no control-plane secrets at %s (%s): %w", path, l.missingHint(), err)
	}
	return trust.LoadOrCreateSecrets(path)
}

func newAdminEnvAddCmd(std cli.Stdio) *cobra.Command {
	var loc cpLocation
	var tenant, env, workerURL string
	cmd := storeLeaf(std, "add", "Create a tenant-env, or set the worker URL of an existing one", &loc, func() error {
		if tenant == "" || env == "" || workerURL == "" {
			return errors.New("--tenant, --env and --worker-url are required")
		}
		return nil
	}, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
		e, err := provision.EnsureEnv(ctx, st, tenant, env, workerURL)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "tenant-env %s/%s (namespace %s), worker %s, created %s\n",
			e.Tenant, e.Name, provision.Namespace(e.Tenant, e.Name), e.WorkerURL, cli.FormatTime(e.CreatedAt))
		fmt.Fprintf(stdout, "next: talkide admin token issue --tenant %s --env %s | kubectl apply -f -\n", e.Tenant, e.Name)
		return nil
	})
	fs := cmd.Flags()
	fs.StringVar(&tenant, "tenant", "", "tenant (required): lowercase letters, digits, '-'")
	fs.StringVar(&env, "env", "", "env (required): lowercase letters, digits, '-'")
	fs.StringVar(&workerURL, "worker-url", "", "base URL of the tenant-env's worker (required), e.g. http://talkide-worker.TENANT-ENV.svc:8080")
	return cmd
}

func newAdminEnvListCmd(std cli.Stdio) *cobra.Command {
	var loc cpLocation
	cmd := storeLeaf(std, "list", "List the tenant-envs", &loc, nil, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Tenant, e.Name, provision.Namespace(e.Tenant, e.Name), u, cli.FormatTime(e.CreatedAt))
		}
		return tw.Flush()
	})
	return cmd
}

func newAdminTokenIssueCmd(std cli.Stdio) *cobra.Command {
	var loc cpLocation
	var tenant, env, output string
	var ttl time.Duration
	var secrets *trust.Secrets
	cmd := storeLeaf(std, "issue", "Issue an identity token and print the worker's Secret talkide-worker-token (the only time the token is shown)", &loc, func() (err error) {
		if tenant == "" || env == "" {
			return errors.New("--tenant and --env are required")
		}
		if output != "secret-yaml" && output != "json" && output != "token" {
			return fmt.Errorf("--output %q: want secret-yaml, json or token", output)
		}
		if ttl <= 0 {
			return fmt.Errorf("--ttl %s: want a positive duration", ttl)
		}
		// The secrets and the store before issuing: a token is never
		// issued that cannot be printed.
		secrets, err = loc.secrets()
		return err
	}, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
		token, rec, err := provision.IssueIdentityToken(ctx, st, tenant, env, ttl, time.Now())
		if err != nil {
			return err
		}
		ck := secrets.Commands().Newest()
		ws := provision.NewWorkerSecret(ck.Secret, ck.ID, tenant, env, token)
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
			rec.ID, tenant, env, cli.FormatTime(rec.ExpiresAt), tenant, env, "talkide/identity-token-id")
		return nil
	})
	fs := cmd.Flags()
	fs.StringVar(&tenant, "tenant", "", "tenant (required)")
	fs.StringVar(&env, "env", "", "env (required)")
	fs.DurationVar(&ttl, "ttl", provision.DefaultTokenTTL, "lifetime of the identity token")
	fs.StringVar(&output, "output", "secret-yaml", "what to print: secret-yaml or json (the Secret talkide-worker-token as a Kubernetes manifest), or token (the identity token alone)")
	return cmd
}

func newAdminTokenRevokeCmd(std cli.Stdio) *cobra.Command {
	return revokeLeaf(std, "Revoke an identity token (the end of a rotation's grace period)", "identity token",
		"id of the identity token to revoke (required; the Secret's talkide/identity-token-id annotation)",
		func(ctx context.Context, st store.Store, id string, now time.Time) (revoked, error) {
			rec, err := provision.RevokeIdentityToken(ctx, st, id, now)
			return revoked{rec.ID, rec.Tenant + "/" + rec.Env, rec.RevokedAt}, err
		})
}

// revoked is a token a revokeLeaf revoked: its id, whose it is (a user, a
// tenant-env) and since when it is refused.
type revoked struct {
	id, owner string
	at        time.Time
}

// revokeLeaf is a command that revokes the token --id names now, as revoke
// does, and says so: what is a token's kind ("API token").
func revokeLeaf(std cli.Stdio, short, what, idHelp string, revoke func(ctx context.Context, st store.Store, id string, now time.Time) (revoked, error)) *cobra.Command {
	var (
		loc cpLocation
		id  string
	)
	cmd := storeLeaf(std, "revoke", short, &loc, func() error {
		if id == "" {
			return errors.New("--id is required")
		}
		return nil
	}, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
		now := time.Now().UTC().Truncate(time.Millisecond)
		r, err := revoke(ctx, st, id, now)
		if err != nil {
			return err
		}
		// The store keeps the earliest revocation time: one set in the
		// future (a rotation's grace period) is brought forward to now.
		if r.at.Before(now) {
			fmt.Fprintf(stdout, "%s %s of %s was already revoked at %s\n", what, r.id, r.owner, cli.FormatTime(r.at))
			return nil
		}
		fmt.Fprintf(stdout, "revoked %s %s of %s at %s\n", what, r.id, r.owner, cli.FormatTime(r.at))
		return nil
	})
	cmd.Flags().StringVar(&id, "id", "", idHelp)
	return cmd
}

// storeLeaf is an adminLeaf that runs body with the control-plane's store
// open, once check (nil: none) has passed: a command line its flags
// refuse opens nothing.
func storeLeaf(std cli.Stdio, use, short string, loc *cpLocation, check func() error, body func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error) *cobra.Command {
	return adminLeaf(std, use, short, loc, func(ctx context.Context, stdout, stderr io.Writer) error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		st, err := loc.open(ctx, stderr)
		if err != nil {
			return err
		}
		defer st.Close()
		return body(ctx, st, stdout, stderr)
	})
}
