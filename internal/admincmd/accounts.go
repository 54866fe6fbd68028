package admincmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// talkide admin user … and admin api-token …: tenant memberships and users'
// API tokens, on the control-plane's database directly, as the other admin
// commands (docs/accounts.md).

func newAdminUserCmd(std cli.Stdio) *cobra.Command {
	return cli.NewGroup("user", "Users' memberships of tenants and tenant-envs, with their roles",
		newAdminUserAddCmd(std), newAdminUserListCmd(std), newAdminUserRemoveCmd(std))
}

func newAdminAPITokenCmd(std cli.Stdio) *cobra.Command {
	return cli.NewGroup("api-token", "Users' API tokens for the browser API (talkide chat, scripts)",
		newAdminAPITokenIssueCmd(std), newAdminAPITokenListCmd(std), newAdminAPITokenRevokeCmd(std))
}

// membershipFlags name a membership.
type membershipFlags struct{ tenant, env, user string }

func (f *membershipFlags) check(needUser bool) error {
	if f.tenant == "" || (needUser && f.user == "") {
		if needUser {
			return errors.New("--tenant and --user are required")
		}
		return errors.New("--tenant is required")
	}
	if err := contract.ValidateID("tenant", f.tenant); err != nil {
		return err
	}
	if f.env != "" {
		if err := contract.ValidateID("env", f.env); err != nil {
			return err
		}
	}
	if f.user != "" {
		return contract.ValidateID("user", f.user)
	}
	return nil
}

// add registers the flags with their help in this command.
func (f *membershipFlags) add(fs *pflag.FlagSet, tenant, env, user string) {
	fs.StringVar(&f.tenant, "tenant", "", tenant)
	fs.StringVar(&f.env, "env", "", env)
	fs.StringVar(&f.user, "user", "", user)
}

func (f *membershipFlags) where() string {
	if f.env == "" {
		return "tenant " + f.tenant + " (every env)"
	}
	return "tenant-env " + f.tenant + "/" + f.env
}

func newAdminUserAddCmd(std cli.Stdio) *cobra.Command {
	var (
		loc        cpLocation
		f          membershipFlags
		role, name string
	)
	cmd := storeLeaf(std, "add", "Add a user to a tenant (or one env of it) with a role, creating the user if needed; again to change the role", &loc, func() error { return f.check(true) }, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
		m, err := auth.AddMember(ctx, st, store.Membership{UserID: f.user, Tenant: f.tenant, Env: f.env, Role: store.Role(role)}, name, time.Now())
		if errors.Is(err, auth.ErrBadRole) {
			return fmt.Errorf("--role %q: want %s or %s", role, store.RoleMember, store.RoleTenantAdmin)
		}
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%s does not exist (talkide admin env list): %w", f.where(), err)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "user %s is %s of %s, since %s\n", m.UserID, m.Role, f.where(), cli.FormatTime(m.CreatedAt))
		return nil
	})
	fs := cmd.Flags()
	f.add(fs, "tenant (required)",
		"one env of the tenant; default every env of it",
		"user id (required): the id an OpenID Connect login's user claim, a trusted proxy's header or an API token names")
	fs.StringVar(&role, "role", string(store.RoleMember), "member (the user's own conversations) or tenant-admin (every conversation of the tenant, or of --env)")
	fs.StringVar(&name, "name", "", "display name of a new user (default the id)")
	return cmd
}

func newAdminUserListCmd(std cli.Stdio) *cobra.Command {
	var (
		loc cpLocation
		f   membershipFlags
	)
	cmd := storeLeaf(std, "list", "List the memberships of a tenant (--tenant) or of a user (--user)", &loc, func() error {
		if f.tenant == "" && f.user == "" {
			return errors.New("--tenant or --user is required")
		}
		if f.tenant != "" {
			if err := f.check(false); err != nil {
				return err
			}
		} else if err := contract.ValidateID("user", f.user); err != nil {
			return err
		}
		return nil
	}, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
		ms, err := st.ListMemberships(ctx, f.user, f.tenant)
		if err != nil {
			return err
		}
		t := cli.Table{Head: []string{"USER", "TENANT", "ENV", "ROLE", "SOURCE", "SINCE"}}
		for _, m := range ms {
			if f.env != "" && m.Env != f.env && m.Env != "" {
				continue
			}
			env := m.Env
			if env == "" {
				env = "*"
			}
			source := "admin"
			if m.FromClaim {
				source = "claim" // the login's tenants claim manages it
			}
			t.Add(m.UserID, m.Tenant, env, string(m.Role), source, cli.FormatTime(m.CreatedAt))
		}
		if len(t.Rows) == 0 {
			fmt.Fprintln(stdout, "no memberships (add one: talkide admin user add --tenant T --user U)")
			return nil
		}
		return t.Write(stdout)
	})
	fs := cmd.Flags()
	f.add(fs, "list this tenant's members",
		"with --tenant: only who reaches this env",
		"list this user's memberships")
	return cmd
}

func newAdminUserRemoveCmd(std cli.Stdio) *cobra.Command {
	var (
		loc cpLocation
		f   membershipFlags
	)
	cmd := storeLeaf(std, "remove", "Remove a user's membership of a tenant (or of one env of it); their conversations there become unreachable to them", &loc, func() error { return f.check(true) }, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
		if err := st.DeleteMembership(ctx, f.user, f.tenant, f.env); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("user %s has no membership of %s (talkide admin user list --user %s)", f.user, f.where(), f.user)
			}
			return err
		}
		fmt.Fprintf(stdout, "user %s is no longer a member of %s\n", f.user, f.where())
		return nil
	})
	fs := cmd.Flags()
	f.add(fs, "tenant (required)",
		"the env of an env membership; default the tenant-wide one",
		"user id (required)")
	return cmd
}

func newAdminAPITokenIssueCmd(std cli.Stdio) *cobra.Command {
	var (
		loc        cpLocation
		user, name string
		ttl        time.Duration
	)
	cmd := storeLeaf(std, "issue", "Issue an API token for a user and print it (the only time it is shown)", &loc, func() error {
		if user == "" {
			return errors.New("--user is required")
		}
		if ttl <= 0 {
			return fmt.Errorf("--ttl %s: want a positive duration", ttl)
		}
		return nil
	}, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
		token, rec, err := auth.IssueAPIToken(ctx, st, user, name, ttl, time.Now())
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("no user %s (add them first: talkide admin user add --tenant T --user %s)", user, user)
		}
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(stdout, token); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "issued API token %s for %s, valid until %s; it is shown only this once.\n"+
			"Use it: talkide login --url URL (paste it), or talkide chat --url URL --token-file FILE.\n"+
			"Revoke it: talkide admin api-token revoke --id %s\n", rec.ID, rec.UserID, cli.FormatTime(rec.ExpiresAt), rec.ID)
		return nil
	})
	fs := cmd.Flags()
	fs.StringVar(&user, "user", "", "user id (required)")
	fs.StringVar(&name, "name", "", "what the token is for, shown by list (e.g. laptop, ci)")
	fs.DurationVar(&ttl, "ttl", auth.DefaultAPITokenTTL, "lifetime of the token")
	return cmd
}

func newAdminAPITokenListCmd(std cli.Stdio) *cobra.Command {
	var (
		loc  cpLocation
		user string
	)
	cmd := storeLeaf(std, "list", "List API tokens (never the tokens themselves): ids, names, lifetimes, last use", &loc, func() error {
		if user != "" {
			if err := contract.ValidateID("user", user); err != nil {
				return err
			}
		}
		return nil
	}, func(ctx context.Context, st store.Store, stdout, stderr io.Writer) error {
		toks, err := st.ListAPITokens(ctx, user)
		if err != nil {
			return err
		}
		if len(toks) == 0 {
			fmt.Fprintln(stdout, "no API tokens (issue one: talkide admin api-token issue --user U)")
			return nil
		}
		t := cli.Table{Head: []string{"ID", "USER", "NAME", "CREATED", "EXPIRES", "LAST USED", "REVOKED"}}
		for _, k := range toks {
			name := k.Name
			if name == "" {
				name = "-"
			}
			t.Add(k.ID, k.UserID, name, cli.FormatTime(k.CreatedAt), cli.FormatTime(k.ExpiresAt), cli.FormatTime(k.LastUsedAt), cli.FormatTime(k.RevokedAt))
		}
		return t.Write(stdout)
	})
	cmd.Flags().StringVar(&user, "user", "", "only this user's tokens")
	return cmd
}

func newAdminAPITokenRevokeCmd(std cli.Stdio) *cobra.Command {
	return revokeLeaf(std, "Revoke an API token by its id", "API token", "id of the token (required; talkide admin api-token list)",
		func(ctx context.Context, st store.Store, id string, now time.Time) (revoked, error) {
			rec, err := auth.RevokeAPIToken(ctx, st, id, now)
			return revoked{rec.ID, rec.UserID, rec.RevokedAt}, err
		})
}
