// Package rolestest makes a control-plane's data directory for the tests of
// the commands that work on one (talkide admin, talkide sessions).
package rolestest

import (
	"testing"

	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/trust"
)

// NewControlPlaneDir makes a data directory as talkide controlplane leaves
// it: a secrets file and a migrated SQLite database. It returns the
// directory and the secrets written there.
func NewControlPlaneDir(t testing.TB) (string, *trust.Secrets) {
	t.Helper()
	dir := t.TempDir()
	cp := roles.ControlPlaneDir(dir)
	secrets, err := trust.LoadOrCreateSecrets(cp.Secrets())
	if err != nil {
		t.Fatal(err)
	}
	st, err := roles.OpenStore(t.Context(), "", cp.Database(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, secrets
}
