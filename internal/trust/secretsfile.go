package trust

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/secretfile"
)

// Secrets are the control-plane's own keys, kept in a 0600 JSON file:
// the master secrets of command/report signatures and the WorkerToken keys.
// In production the file comes from a Kubernetes Secret.
//
// Both sets rotate by key id (`talkide admin keys rotate`), so the file
// lists each as a keyring, oldest first, with when a key starts signing and
// when it retires. A file from before rotation holds one command secret and
// a map of token keys; it loads as rings of those, and a rotation writes
// the new form.
type Secrets struct {
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

	commands, tokens *Keyring

	mu sync.Mutex
	// guarded by mu: called after each reload that installed keys
	reloaded []func()
}

// OnReload registers f to run after each reload of the file.
func (s *Secrets) OnReload(f func()) {
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

// fileKey is a Key in the secrets file.
type fileKey struct {
	ID       string     `json:"id"`
	Secret   []byte     `json:"secret"`
	SignFrom *time.Time `json:"sign_from,omitempty"`
	RetireAt *time.Time `json:"retire_at,omitempty"`
}

func toFileKeys(keys []Key) []fileKey {
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

func fromFileKeys(keys []fileKey) []Key {
	out := make([]Key, len(keys))
	for i, k := range keys {
		out[i] = Key{ID: k.ID, Secret: k.Secret}
		if k.SignFrom != nil {
			out[i].SignFrom = *k.SignFrom
		}
		if k.RetireAt != nil {
			out[i].RetireAt = *k.RetireAt
		}
	}
	return out
}

// LoadOrCreateSecrets reads path, creating it with fresh keys if missing.
func LoadOrCreateSecrets(path string) (*Secrets, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		s := &Secrets{
			CommandKeyring: []fileKey{{ID: "c1", Secret: NewKey()}},
			TokenKeyring:   []fileKey{{ID: "k1", Secret: NewKey()}},
			LoginKey:       NewKey(),
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := s.Save(path); err != nil {
			return nil, err
		}
		return ParseSecrets(path, s.JSON())
	}
	if err != nil {
		return nil, err
	}
	return ParseSecrets(path, b)
}

// JSON is the file's contents for s.
func (s *Secrets) JSON() []byte {
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic(err)
	}
	return out
}

// ParseSecrets reads the file's contents and builds its keyrings.
func ParseSecrets(path string, b []byte) (*Secrets, error) {
	var s Secrets
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
		ring, err := NewKeyring(old.TokenKeyID, old.TokenKeys)
		if err != nil {
			return nil, fmt.Errorf("secrets file %s: %w", path, err)
		}
		s.TokenKeyring = toFileKeys(ring.Keys())
	}
	var err error
	if s.commands, err = NewRotatingKeyring(fromFileKeys(s.CommandKeyring)); err != nil {
		return nil, fmt.Errorf("secrets file %s: command keys: %w", path, err)
	}
	if s.tokens, err = NewRotatingKeyring(fromFileKeys(s.TokenKeyring)); err != nil {
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

// Save writes the keyrings to path in place of what is there: a new file
// renamed over the old, so a reader sees one or the other whole.
func (s *Secrets) Save(path string) error {
	return atomicfile.WriteFile(path, s.JSON(), 0o600)
}

// Tokens is the WorkerToken keyring, kept in step with the file by the
// watch.
func (s *Secrets) Tokens() *Keyring { return s.tokens }

// Commands is the keyring of the command secrets, from which each
// tenant-env's command key is derived (DeriveEnvKey).
func (s *Secrets) Commands() *Keyring { return s.commands }

// Watcher returns the file at path, watched: while its Run runs, the
// keyrings follow the file, so a rotation written there (or a Secret the
// kubelet swaps in) takes effect with no restart. A file that does not
// parse changes nothing and is logged; the keys already held keep
// working.
func (s *Secrets) Watcher(path string, log *slog.Logger) (*secretfile.File, error) {
	return secretfile.Open(path, &secretfile.Options{Logger: log, OnChange: func(text string) {
		next, err := ParseSecrets(path, []byte(text))
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
}

// Rotation is one keyring's rotation: the key added, and the ring after.
type Rotation struct {
	Next Key
	Keys []Key
}

// RotateCommands adds a new command secret that signs from signFrom; the
// older ones retire at retireAt, those retired already are dropped.
func (s *Secrets) RotateCommands(signFrom, retireAt, now time.Time) Rotation {
	r := rotateRing(s.commands.Keys(), "c", signFrom, retireAt, now)
	s.CommandKeyring = toFileKeys(r.Keys)
	return r
}

// RotateTokens is RotateCommands for the WorkerToken keys.
func (s *Secrets) RotateTokens(signFrom, retireAt, now time.Time) Rotation {
	r := rotateRing(s.tokens.Keys(), "k", signFrom, retireAt, now)
	s.TokenKeyring = toFileKeys(r.Keys)
	return r
}

// rotateRing adds a key with a new id to keys: it signs from signFrom,
// every older key retires at retireAt, keys already retired are dropped.
func rotateRing(keys []Key, prefix string, signFrom, retireAt, now time.Time) Rotation {
	next := Key{ID: nextKeyID(keys, prefix), Secret: NewKey(), SignFrom: signFrom}
	return Rotation{Next: next, Keys: Rotated(keys, next, retireAt, now)}
}

// nextKeyID is prefix followed by one more than the highest number of an id
// of that form in keys: c1, c2, ...
func nextKeyID(keys []Key, prefix string) string {
	highest := 0
	for _, k := range keys {
		if n, err := strconv.Atoi(strings.TrimPrefix(k.ID, prefix)); err == nil && strings.HasPrefix(k.ID, prefix) && n > highest {
			highest = n
		}
	}
	return prefix + strconv.Itoa(highest+1)
}
