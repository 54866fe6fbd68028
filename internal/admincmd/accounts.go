package admincmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

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
	cmd := adminLeaf(std, "add", "Add a user to a tenant (or one env of it) with a role, creating the user if needed; again to change the role", &loc, func(ctx context.Context, stdout, stderr io.Writer) error {
		if err := f.check(true); err != nil {
			return err
		}
		st, err := loc.open(ctx, stderr)
		if err != nil {
			return err
		}
		defer st.Close()
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
	fs.StringVar(&f.tenant, "tenant", "", "tenant (required)")
	fs.StringVar(&f.env, "env", "", "one env of the tenant; default every env of it")
	fs.StringVar(&f.user, "user", "", "user id (required): the id an OpenID Connect login's user claim, a trusted proxy's header or an API token names")
	fs.StringVar(&role, "role", string(store.RoleMember), "member (the user's own conversations) or tenant-admin (every conversation of the tenant, or of --env)")
	fs.StringVar(&name, "name", "", "display name of a new user (default the id)")
	return cmd
}

func newAdminUserListCmd(std cli.Stdio) *cobra.Command {
	var (
		loc cpLocation
		f   membershipFlags
	)
	cmd := adminLeaf(std, "list", "List the memberships of a tenant (--tenant) or of a user (--user)", &loc, func(ctx context.Context, stdout, stderr io.Writer) error {
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
		st, err := loc.open(ctx, stderr)
		if err != nil {
			return err
		}
		defer st.Close()
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
	fs.StringVar(&f.tenant, "tenant", "", "list this tenant's members")
	fs.StringVar(&f.env, "env", "", "with --tenant: only who reaches this env")
	fs.StringVar(&f.user, "user", "", "list this user's memberships")
	return cmd
}

func newAdminUserRemoveCmd(std cli.Stdio) *cobra.Command {
	var (
		loc cpLocation
		f   membershipFlags
	)
	cmd := adminLeaf(std, "remove", "Remove a user's membership of a tenant (or of one env of it); their conversations there become unreachable to them", &loc, func(ctx context.Context, stdout, stderr io.Writer) error {
		if err := f.check(true); err != nil {
			return err
		}
		st, err := loc.open(ctx, stderr)
		if err != nil {
			return err
		}
		defer st.Close()
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
	fs.StringVar(&f.tenant, "tenant", "", "tenant (required)")
	fs.StringVar(&f.env, "env", "", "the env of an env membership; default the tenant-wide one")
	fs.StringVar(&f.user, "user", "", "user id (required)")
	return cmd
}

func newAdminAPITokenIssueCmd(std cli.Stdio) *cobra.Command {
	var (
		loc        cpLocation
		user, name string
		ttl        time.Duration
	)
	cmd := adminLeaf(std, "issue", "Issue an API token for a user and print it (the only time it is shown)", &loc, func(ctx context.Context, stdout, stderr io.Writer) error {
		if user == "" {
			return errors.New("--user is required")
		}
		if ttl <= 0 {
			return fmt.Errorf("--ttl %s: want a positive duration", ttl)
		}
		st, err := loc.open(ctx, stderr)
		if err != nil {
			return err
		}
		defer st.Close()
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
	cmd := adminLeaf(std, "list", "List API tokens (never the tokens themselves): ids, names, lifetimes, last use", &loc, func(ctx context.Context, stdout, stderr io.Writer) error {
		if user != "" {
			if err := contract.ValidateID("user", user); err != nil {
				return err
			}
		}
		st, err := loc.open(ctx, stderr)
		if err != nil {
			return err
		}
		defer st.Close()
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
	var (
		loc cpLocation
		id  string
	)
	cmd := adminLeaf(std, "revoke", "Revoke an API token by its id", &loc, func(ctx context.Context, stdout, stderr io.Writer) error {
		if id == "" {
			return errors.New("--id is required")
		}
		st, err := loc.open(ctx, stderr)
		if err != nil {
			return err
		}
		defer st.Close()
		now := time.Now().UTC().Truncate(time.Millisecond)
		rec, err := auth.RevokeAPIToken(ctx, st, id, now)
		if err != nil {
			return err
		}
		if rec.RevokedAt.Before(now) {
			fmt.Fprintf(stdout, "API token %s of %s was already revoked at %s\n", rec.ID, rec.UserID, cli.FormatTime(rec.RevokedAt))
			return nil
		}
		fmt.Fprintf(stdout, "revoked API token %s of %s at %s\n", rec.ID, rec.UserID, cli.FormatTime(rec.RevokedAt))
		return nil
	})
	cmd.Flags().StringVar(&id, "id", "", "id of the token (required; talkide admin api-token list)")
	return cmd
}
