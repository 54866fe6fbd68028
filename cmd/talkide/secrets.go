package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/talkide/platform/internal/trust"
)

// cpSecrets are the control-plane's own keys, kept in a 0600 JSON file:
// the master secret of command/report signatures and the WorkerToken keyring.
// In production the file comes from a Kubernetes Secret.
type cpSecrets struct {
	CommandKeyID  string            `json:"command_key_id"`
	CommandSecret []byte            `json:"command_secret"`
	TokenKeyID    string            `json:"token_key_id"`
	TokenKeys     map[string][]byte `json:"token_keys"`
}

// loadOrCreateSecrets reads path, creating it with fresh keys if missing.
func loadOrCreateSecrets(path string) (*cpSecrets, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		s := &cpSecrets{
			CommandKeyID:  "c1",
			CommandSecret: trust.NewKey(),
			TokenKeyID:    "k1",
			TokenKeys:     map[string][]byte{"k1": trust.NewKey()},
		}
		out, _ := json.MarshalIndent(s, "", "  ")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, out, 0o600); err != nil {
			return nil, err
		}
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	var s cpSecrets
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
	}
	if len(s.CommandSecret) < 32 || s.CommandKeyID == "" || len(s.TokenKeys[s.TokenKeyID]) < 32 {
		return nil, fmt.Errorf("secrets file %s is incomplete", path)
	}
	return &s, nil
}

func (s *cpSecrets) keyring() (*trust.Keyring, error) {
	return trust.NewKeyring(s.TokenKeyID, s.TokenKeys)
}
