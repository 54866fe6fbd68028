package trust

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/talkide/platform/internal/tokenscheme"
)

// ErrRetiredKey is a key id the keyring knew but whose grace has ended.
// It wraps ErrUnknownKey: to a caller both are a credential to refuse.
var ErrRetiredKey = fmt.Errorf("%w: key retired", ErrUnknownKey)

// Key is one signing key of a Keyring, with the times that let it rotate
// without a restart: a new key is added with SignFrom a little ahead, so
// that every process holding the ring (each replica, each worker) knows it
// before anything is signed with it; the key it replaces gets RetireAt, the
// end of its grace, and verifies until then.
type Key struct {
	ID     string
	Secret []byte
	// SignFrom is when the key starts signing; zero: at once.
	SignFrom time.Time
	// RetireAt is when the key stops verifying; zero: never.
	RetireAt time.Time
}

// retired reports whether k no longer verifies at now.
func (k Key) retired(now time.Time) bool { return !k.RetireAt.IsZero() && !now.Before(k.RetireAt) }

// Keyring holds HMAC keys by key id, in the order they were added: the
// WorkerToken keys, the control-plane's command secrets, a worker's
// command keys. What is signed names its key id, and only that key is ever
// tried. The signing key at a time is the last key whose SignFrom has
// passed; every key not retired verifies. Set replaces the keys while
// readers run (a reloaded secrets file, a worker's rotated key file).
type Keyring struct {
	keys atomic.Pointer[[]Key]
}

// NewKeyring returns a keyring signing with keys[current]; the other keys
// verify and never sign.
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	if _, ok := keys[current]; !ok {
		return nil, fmt.Errorf("trust: current key id %q is not in the keyring", current)
	}
	list := make([]Key, 0, len(keys))
	for id, secret := range keys {
		if id != current {
			list = append(list, Key{ID: id, Secret: secret})
		}
	}
	slices.SortFunc(list, func(a, b Key) int {
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	return NewRotatingKeyring(append(list, Key{ID: current, Secret: keys[current]}))
}

// NewRotatingKeyring returns a keyring of keys, oldest first (see Set).
func NewRotatingKeyring(keys []Key) (*Keyring, error) {
	k := &Keyring{}
	if err := k.Set(keys); err != nil {
		return nil, err
	}
	return k, nil
}

// ValidateKeys checks a rotation's keys, oldest first: at least one key,
// ids of 1-32 base64url characters and unique, secrets of at least 32
// bytes, the newest key never retired, and each retired key verifying
// until after its successor starts signing (else nothing would sign in
// between).
func ValidateKeys(keys []Key) error {
	if len(keys) == 0 {
		return errors.New("trust: a keyring needs at least one key")
	}
	seen := map[string]bool{}
	for i, key := range keys {
		if !tokenscheme.IsBase64URL(key.ID) || len(key.ID) > 32 {
			return fmt.Errorf("trust: key id %q must be 1-32 base64url characters", key.ID)
		}
		if seen[key.ID] {
			return fmt.Errorf("trust: key id %q appears twice", key.ID)
		}
		seen[key.ID] = true
		if len(key.Secret) < 32 {
			return fmt.Errorf("trust: key %q is shorter than 32 bytes", key.ID)
		}
		if key.RetireAt.IsZero() {
			continue
		}
		if i == len(keys)-1 {
			return fmt.Errorf("trust: key %q is the newest and cannot be retired", key.ID)
		}
		if next := keys[i+1]; !key.RetireAt.After(next.SignFrom) {
			return fmt.Errorf("trust: key %q retires before %q signs", key.ID, next.ID)
		}
	}
	return nil
}

// Set replaces the keys (oldest first, checked by ValidateKeys); on an
// error the keyring keeps the keys it had.
func (k *Keyring) Set(keys []Key) error {
	if err := ValidateKeys(keys); err != nil {
		return err
	}
	cp := make([]Key, len(keys))
	for i, key := range keys {
		cp[i] = key
		cp[i].Secret = append([]byte(nil), key.Secret...)
	}
	k.keys.Store(&cp)
	return nil
}

// Keys returns a copy of the keys, oldest first.
func (k *Keyring) Keys() []Key {
	keys := *k.keys.Load()
	cp := make([]Key, len(keys))
	for i, key := range keys {
		cp[i] = key
		cp[i].Secret = append([]byte(nil), key.Secret...)
	}
	return cp
}

// Signing returns the key that signs at now: the newest whose SignFrom
// has passed (the oldest when none has, which ValidateKeys makes a ring
// whose first key starts in the future).
func (k *Keyring) Signing(now time.Time) Key {
	keys := *k.keys.Load()
	for i := len(keys) - 1; i > 0; i-- {
		if !now.Before(keys[i].SignFrom) {
			return keys[i]
		}
	}
	return keys[0]
}

// Newest returns the key added last: the one to hand out to workers as
// soon as it is added, before it signs.
func (k *Keyring) Newest() Key {
	keys := *k.keys.Load()
	return keys[len(keys)-1]
}

// CurrentKeyID names the key that signs now.
func (k *Keyring) CurrentKeyID() string { return k.Signing(time.Now()).ID }

// Verifying returns the secret of key id if it verifies at now:
// ErrUnknownKey for an id the ring does not hold, ErrRetiredKey for one
// whose grace has ended.
func (k *Keyring) Verifying(id string, now time.Time) ([]byte, error) {
	for _, key := range *k.keys.Load() {
		if key.ID != id {
			continue
		}
		if key.retired(now) {
			return nil, ErrRetiredKey
		}
		return key.Secret, nil
	}
	return nil, ErrUnknownKey
}

// Rotated returns keys with next added as the newest key: every key that
// was still to verify for ever now retires at retireAt (an earlier
// retirement stays), and keys already retired at now are dropped. A key
// with next's id is replaced. The result is for Set.
func Rotated(keys []Key, next Key, retireAt, now time.Time) []Key {
	out := make([]Key, 0, len(keys)+1)
	for _, key := range keys {
		if key.ID == next.ID || key.retired(now) {
			continue
		}
		if key.RetireAt.IsZero() || key.RetireAt.After(retireAt) {
			key.RetireAt = retireAt
		}
		out = append(out, key)
	}
	return append(out, next)
}

// FormatKey is how a key travels in a file or an environment variable:
// "ID:BASE64". The id travels with the key so that a file that changes
// (a rotated Secret) changes both at once.
func FormatKey(id string, secret []byte) string {
	return id + ":" + base64.StdEncoding.EncodeToString(secret)
}

// ParseKey reads what FormatKey writes, or a bare base64 key, which is
// given the id defaultID. Errors name neither the key nor its bytes.
func ParseKey(text, defaultID string) (Key, error) {
	text = strings.TrimSpace(text)
	id, b64, ok := strings.Cut(text, ":")
	if !ok {
		id, b64 = defaultID, text
	}
	secret, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return Key{}, errors.New("trust: the key is not base64")
	}
	k := Key{ID: id, Secret: secret}
	if err := ValidateKeys([]Key{k}); err != nil {
		return Key{}, err
	}
	return k, nil
}
