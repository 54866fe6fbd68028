package auth

import (
	"strings"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

func TestParseTenantClaim(t *testing.T) {
	for v, want := range map[string]store.Membership{
		"acme":                   {Tenant: "acme", Role: store.RoleMember},
		"acme/prod":              {Tenant: "acme", Env: "prod", Role: store.RoleMember},
		"acme:tenant-admin":      {Tenant: "acme", Role: store.RoleTenantAdmin},
		"acme/prod:member":       {Tenant: "acme", Env: "prod", Role: store.RoleMember},
		"acme/prod:tenant-admin": {Tenant: "acme", Env: "prod", Role: store.RoleTenantAdmin},
	} {
		got, err := ParseTenantClaim(v)
		if err != nil || got != want {
			t.Errorf("ParseTenantClaim(%q) = %+v, %v; want %+v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "/prod", "acme/", "acme:", "acme:operator", "acme:admin", "../acme", "acme/../x", "acme/prod/x", "acme prod", "acme:member:x", "Acme Corp", strings.Repeat("a", 200)} {
		if m, err := ParseTenantClaim(v); err == nil {
			t.Errorf("ParseTenantClaim(%q) = %+v, want an error", v, m)
		}
	}
}

func TestClaimMemberships(t *testing.T) {
	values := claimStrings([]any{"talkide:acme", "talkide:acme/prod:tenant-admin", "talkide:acme:tenant-admin", "engineering",
		"talkide:bad tenant", 7, "talkide:globex/dev", "talkide:acme/prod"})
	ms, ignored := claimMemberships("alice", "talkide:", values)
	want := []store.Membership{
		{UserID: "alice", Tenant: "acme", Role: store.RoleTenantAdmin},
		{UserID: "alice", Tenant: "acme", Env: "prod", Role: store.RoleTenantAdmin},
		{UserID: "alice", Tenant: "globex", Env: "dev", Role: store.RoleMember},
	}
	if len(ms) != len(want) {
		t.Fatalf("memberships %+v, want %+v", ms, want)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("membership %d: %+v, want %+v", i, ms[i], want[i])
		}
	}
	if len(ignored) != 1 || !strings.Contains(ignored[0], "bad tenant") {
		t.Errorf("ignored %q, want the one value with the prefix that does not parse", ignored)
	}
	if got := claimStrings("acme"); len(got) != 1 || got[0] != "acme" {
		t.Errorf("a string claim: %q", got)
	}
	if got := claimStrings(map[string]any{"acme": true}); got != nil {
		t.Errorf("an object claim: %q", got)
	}
	many := make([]string, maxClaimValues+10)
	for i := range many {
		many[i] = "acme"
	}
	if ms, ignored := claimMemberships("alice", "", many); len(ms) != 1 || len(ignored) != 1 {
		t.Errorf("%d values: %d memberships, ignored %q", len(many), len(ms), ignored)
	}
}

// FuzzTenantClaim: what ParseTenantClaim accepts names ids and a role the
// store keeps, and nothing else.
func FuzzTenantClaim(f *testing.F) {
	for _, s := range []string{"acme", "acme/prod:tenant-admin", "a/b/c", "a:b:c", "../x", ":member", "acme/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		m, err := ParseTenantClaim(v)
		if err != nil {
			return
		}
		if contract.ValidateID("tenant", m.Tenant) != nil || (m.Env != "" && contract.ValidateID("env", m.Env) != nil) || !m.Role.Valid() {
			t.Fatalf("ParseTenantClaim(%q) = %+v", v, m)
		}
		back := m.Tenant
		if m.Env != "" {
			back += "/" + m.Env
		}
		if back != v && back+":"+string(m.Role) != v {
			t.Fatalf("ParseTenantClaim(%q) = %+v does not spell the value", v, m)
		}
	})
}
