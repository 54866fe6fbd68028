package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/talkide/platform/internal/secretfile"
	"github.com/talkide/platform/internal/trust"
)

// cpSecrets are the control-plane's own keys, kept in a 0600 JSON file:
// the master secrets of command/report signatures and the WorkerToken keys.
// In production the file comes from a Kubernetes Secret.
//
// Both sets rotate by key id (`talkide admin keys rotate`), so the file
// lists each as a keyring, oldest first, with when a key starts signing and
// when it retires. A file from before rotation holds one command secret and
// a map of token keys; it loads as rings of those, and a rotation writes
// the new form.
type cpSecrets struct {
	// CommandKeyID and CommandSecret are the newest command secret when
	// the file was read: what a one-shot command (or a test) signs with.
	// A long-running control-plane uses the rings, which follow the file.
	CommandKeyID  string `json:"-"`
	CommandSecret []byte `json:"-"`

	CommandKeyring []fileKey `json:"command_keyring,omitempty"`
	TokenKeyring   []fileKey `json:"token_keyring,omitempty"`
	// LoginKey signs the OIDC login flow's state. A file without one
	// derives it from its oldest command secret; a rotation writes it
	// down first, so logins in flight survive the old secret's removal.
	LoginKey []byte `json:"oidc_login_key,omitempty"`

	commands, tokens *trust.Keyring

	mu sync.Mutex
	// guarded by mu: called after each reload that installed keys
	reloaded []func()
}

// onReload registers f to run after each reload of the file.
func (s *cpSecrets) onReload(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloaded = append(s.reloaded, f)
}

// legacySecrets is the form of the file before rotation.
type legacySecrets struct {
	CommandKeyID  string            `json:"command_key_id"`
	CommandSecret []byte            `json:"command_secret"`
	TokenKeyID    string            `json:"token_key_id"`
	TokenKeys     map[string][]byte `json:"token_keys"`
}

// fileKey is a trust.Key in the secrets file.
type fileKey struct {
	ID       string     `json:"id"`
	Secret   []byte     `json:"secret"`
	SignFrom *time.Time `json:"sign_from,omitempty"`
	RetireAt *time.Time `json:"retire_at,omitempty"`
}

func toFileKeys(keys []trust.Key) []fileKey {
	out := make([]fileKey, len(keys))
	for i, k := range keys {
		out[i] = fileKey{ID: k.ID, Secret: k.Secret}
		if !k.SignFrom.IsZero() {
			t := k.SignFrom.UTC()
			out[i].SignFrom = &t
		}
		if !k.RetireAt.IsZero() {
			t := k.RetireAt.UTC()
			out[i].RetireAt = &t
		}
	}
	return out
}

func fromFileKeys(keys []fileKey) []trust.Key {
	out := make([]trust.Key, len(keys))
	for i, k := range keys {
		out[i] = trust.Key{ID: k.ID, Secret: k.Secret}
		if k.SignFrom != nil {
			out[i].SignFrom = *k.SignFrom
		}
		if k.RetireAt != nil {
			out[i].RetireAt = *k.RetireAt
		}
	}
	return out
}

// loadOrCreateSecrets reads path, creating it with fresh keys if missing.
func loadOrCreateSecrets(path string) (*cpSecrets, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		s := &cpSecrets{
			CommandKeyring: []fileKey{{ID: "c1", Secret: trust.NewKey()}},
			TokenKeyring:   []fileKey{{ID: "k1", Secret: trust.NewKey()}},
			LoginKey:       trust.NewKey(),
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := s.save(path); err != nil {
			return nil, err
		}
		return parseSecrets(path, secretsJSON(s))
	}
	if err != nil {
		return nil, err
	}
	return parseSecrets(path, b)
}

func secretsJSON(s *cpSecrets) []byte {
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic(err)
	}
	return out
}

// parseSecrets reads the file's contents and builds its keyrings.
func parseSecrets(path string, b []byte) (*cpSecrets, error) {
	var s cpSecrets
	var old legacySecrets
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &old); err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
	}
	if len(s.CommandKeyring) == 0 {
		if len(old.CommandSecret) < 32 || old.CommandKeyID == "" {
			return nil, fmt.Errorf("secrets file %s is incomplete", path)
		}
		s.CommandKeyring = []fileKey{{ID: old.CommandKeyID, Secret: old.CommandSecret}}
	}
	if len(s.TokenKeyring) == 0 {
		if len(old.TokenKeys[old.TokenKeyID]) < 32 {
			return nil, fmt.Errorf("secrets file %s is incomplete", path)
		}
		ring, err := trust.NewKeyring(old.TokenKeyID, old.TokenKeys)
		if err != nil {
			return nil, fmt.Errorf("secrets file %s: %w", path, err)
		}
		s.TokenKeyring = toFileKeys(ring.Keys())
	}
	var err error
	if s.commands, err = trust.NewRotatingKeyring(fromFileKeys(s.CommandKeyring)); err != nil {
		return nil, fmt.Errorf("secrets file %s: command keys: %w", path, err)
	}
	if s.tokens, err = trust.NewRotatingKeyring(fromFileKeys(s.TokenKeyring)); err != nil {
		return nil, fmt.Errorf("secrets file %s: token keys: %w", path, err)
	}
	newest := s.commands.Newest()
	s.CommandKeyID, s.CommandSecret = newest.ID, newest.Secret
	if len(s.LoginKey) == 0 {
		m := hmac.New(sha256.New, s.CommandKeyring[0].Secret)
		m.Write([]byte("talkide oidc login key"))
		s.LoginKey = m.Sum(nil)
	}
	return &s, nil
}

// save writes the keyrings to path in place of what is there: a new file
// renamed over the old, so a reader sees one or the other whole.
func (s *cpSecrets) save(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".controlplane-secrets-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(secretsJSON(s)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// keyring is the WorkerToken keyring.
func (s *cpSecrets) keyring() (*trust.Keyring, error) { return s.tokens, nil }

// newestCommandKey is the master secret workers are given.
func (s *cpSecrets) newestCommandKey() trust.Key { return s.commands.Newest() }

// watch keeps the keyrings in step with the file at path until ctx ends:
// a rotation written there (or a Secret the kubelet swaps in) takes effect
// with no restart. A file that does not parse changes nothing and is
// logged; the keys already held keep working.
func (s *cpSecrets) watch(ctx context.Context, path string, log *slog.Logger) error {
	_, err := secretfile.Watch(ctx, path, &secretfile.Options{Logger: log, OnChange: func(text string) {
		next, err := parseSecrets(path, []byte(text))
		if err == nil {
			if err = s.commands.Set(next.commands.Keys()); err == nil {
				err = s.tokens.Set(next.tokens.Keys())
			}
		}
		if err != nil {
			log.Warn("secrets file changed but does not load; keeping the keys in use", "err", err)
			return
		}
		log.Info("secrets file reloaded", "command_key", s.commands.Newest().ID, "token_key", s.tokens.Newest().ID)
		s.mu.Lock()
		fs := slices.Clone(s.reloaded)
		s.mu.Unlock()
		for _, f := range fs {
			f()
		}
	}})
	return err
}
