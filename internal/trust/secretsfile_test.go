package trust

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A new secrets file is made 0600 with a key of each kind and a login key;
// loaded again it gives the same keys.
func TestSecretsCreatedAndLoaded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp", "controlplane-secrets.json")
	s, err := LoadOrCreateSecrets(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	again, err := LoadOrCreateSecrets(path)
	if err != nil {
		t.Fatal(err)
	}
	if again.Commands().Newest().ID != "c1" || again.Tokens().Newest().ID != "k1" || string(again.LoginKey) != string(s.LoginKey) ||
		string(again.CommandSecret) != string(s.CommandSecret) {
		t.Error("the file loaded again holds other keys")
	}
}

// A file from before rotation (one command secret, a map of token keys)
// loads as rings of those, with the login key derived from the command
// secret; an incomplete one is refused.
func TestLegacySecretsFile(t *testing.T) {
	cmd, tok := NewKey(), NewKey()
	b, _ := json.Marshal(map[string]any{"command_key_id": "c7", "command_secret": cmd, "token_key_id": "k3", "token_keys": map[string][]byte{"k3": tok}})
	s, err := ParseSecrets("old", b)
	if err != nil {
		t.Fatal(err)
	}
	if s.CommandKeyID != "c7" || string(s.Commands().Newest().Secret) != string(cmd) || s.Tokens().Newest().ID != "k3" || len(s.LoginKey) == 0 {
		t.Errorf("legacy file loaded as %s/%s", s.CommandKeyID, s.Tokens().Newest().ID)
	}
	if _, err := ParseSecrets("bad", []byte(`{"command_key_id":"c1","command_secret":"c2hvcnQ="}`)); err == nil {
		t.Error("an incomplete file was accepted")
	}
}

// A rotation adds c2 and k2, signing from the publish time; a watcher of
// the file installs them in the running keyrings and says so.
func TestRotationReachesAWatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "controlplane-secrets.json")
	running, err := LoadOrCreateSecrets(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := running.Watcher(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	reloaded := make(chan struct{}, 1)
	running.OnReload(func() { reloaded <- struct{}{} })

	rotor, _ := LoadOrCreateSecrets(path)
	now := time.Now().UTC()
	c := rotor.RotateCommands(now.Add(time.Minute), now.Add(2*time.Minute), now)
	k := rotor.RotateTokens(now.Add(time.Minute), now.Add(2*time.Minute), now)
	if c.Next.ID != "c2" || k.Next.ID != "k2" || len(c.Keys) != 2 {
		t.Fatalf("rotation made %s and %s (%d keys)", c.Next.ID, k.Next.ID, len(c.Keys))
	}
	if err := rotor.Save(path); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reloaded:
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher did not reload the file")
	}
	if running.Commands().Newest().ID != "c2" || running.Tokens().Newest().ID != "k2" {
		t.Error("the running keyrings did not take the new keys")
	}
	if running.Commands().Signing(now).ID != "c1" || running.Commands().Signing(now.Add(90*time.Second)).ID != "c2" {
		t.Error("the new command key signs before its publish time, or not after it")
	}
}
