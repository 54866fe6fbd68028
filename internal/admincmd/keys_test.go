package admincmd

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/roles/rolestest"
	"github.com/talkide/platform/internal/trust"
)

// talkide admin keys rotate adds a key of each kind that signs after
// --publish, retires the old ones --grace later, and a control-plane
// watching the file takes the new keys without a restart. A second
// rotation after the grace drops the retired keys; the OIDC login key
// stays the same throughout.
func TestAdminKeysRotate(t *testing.T) {
	dir, before := rolestest.NewControlPlaneDir(t)
	d := "--data-dir=" + dir
	path := filepath.Join(dir, "controlplane-secrets.json")
	running, err := trust.LoadOrCreateSecrets(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, err := running.Watcher(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	go watch.Run(ctx)
	reloaded := make(chan struct{}, 4)
	running.OnReload(func() { reloaded <- struct{}{} })

	_, note := mustAdmin(t, "keys", "rotate", d, "--publish", "5m", "--grace", "10m")
	if !strings.Contains(note, "new command key c2 signs from") || !strings.Contains(note, "new WorkerToken key k2") || !strings.Contains(note, "c1 until") {
		t.Errorf("rotate said %q", note)
	}
	select {
	case <-reloaded:
	case <-time.After(30 * time.Second):
		t.Fatal("the watching control-plane did not reload the file")
	}
	now := time.Now()
	for name, ring := range map[string]*trust.Keyring{"command": running.Commands(), "token": running.Tokens()} {
		keys := ring.Keys()
		if len(keys) != 2 {
			t.Fatalf("%s keys after the rotation: %d", name, len(keys))
		}
		old, next := keys[0], keys[1]
		// Published: the old key still signs, both verify.
		if ring.Signing(now).ID != old.ID || ring.Newest().ID != next.ID {
			t.Errorf("%s: signs with %s, newest %s", name, ring.Signing(now).ID, ring.Newest().ID)
		}
		if ring.Signing(now.Add(6*time.Minute)).ID != next.ID {
			t.Errorf("%s: after the publish delay signs with %s", name, ring.Signing(now.Add(6*time.Minute)).ID)
		}
		if _, err := ring.Verifying(old.ID, now.Add(14*time.Minute)); err != nil {
			t.Errorf("%s: the old key within the grace: %v", name, err)
		}
		if _, err := ring.Verifying(old.ID, now.Add(16*time.Minute)); !errors.Is(err, trust.ErrUnknownKey) {
			t.Errorf("%s: the old key after the grace: %v", name, err)
		}
	}
	if running.Commands().Keys()[0].ID != before.CommandKeyID {
		t.Errorf("the oldest command key is %s, want %s", running.Commands().Keys()[0].ID, before.CommandKeyID)
	}
	loginKey := running.LoginKey

	// The file holds the new form, 0600, and keys list shows the states.
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets file mode %v, %v", fi.Mode(), err)
	}
	out, _ := mustAdmin(t, "keys", "list", d)
	if !strings.Contains(out, "command  c1  signs") || !strings.Contains(out, "command  c2  published") || !strings.Contains(out, "token    k2  published") {
		t.Errorf("keys list:\n%s", out)
	}
	for _, secret := range [][]byte{before.CommandSecret, running.Commands().Newest().Secret} {
		b, _ := json.Marshal(secret)
		if strings.Contains(out+note, strings.Trim(string(b), `"`)) {
			t.Error("keys rotate or list printed a secret")
		}
	}

	// As a Secret manifest instead: the file is left alone.
	was, _ := os.ReadFile(path)
	out, _ = mustAdmin(t, "keys", "rotate", d, "--only", "token", "--print-secret", "talkide/talkide-controlplane-secrets")
	var m struct {
		Kind     string
		Metadata struct{ Name, Namespace string }
		Data     map[string][]byte
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.Kind != "Secret" || m.Metadata.Namespace != "talkide" {
		t.Fatalf("--print-secret printed %q (%v)", out, err)
	}
	printed, err := trust.ParseSecrets("printed", m.Data["controlplane-secrets.json"])
	if err != nil || printed.Tokens().Newest().ID != "k3" || printed.Commands().Newest().ID != "c2" || string(printed.LoginKey) != string(loginKey) {
		t.Fatalf("the printed file: %v", err)
	}
	if now, _ := os.ReadFile(path); string(now) != string(was) {
		t.Error("--print-secret changed the secrets file")
	}

	for _, args := range [][]string{
		{"--only", "both"}, {"--grace", "0s"}, {"--publish", "-1m"}, {"--print-secret", "no-slash"},
	} {
		if _, _, err := admin(t, append([]string{"keys", "rotate", d}, args...)...); err == nil {
			t.Errorf("keys rotate %v succeeded", args)
		}
	}
}
