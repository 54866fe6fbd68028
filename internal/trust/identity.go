package trust

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Identity tokens look like "tki_<id>.<secret>": the id finds the stored row,
// the secret is checked against its SHA-256. A high-entropy random secret
// needs no slow hash: nothing can be guessed from its digest.
const identityPrefix = "tki_"

// MaxIdentityTokenLen bounds what ParseIdentityToken reads.
const MaxIdentityTokenLen = 256

// ErrMalformed is returned for a token or signature that cannot be parsed.
var ErrMalformed = errors.New("malformed credential")

// IdentityToken is a freshly issued identity token. Token goes to the worker
// once; only ID and Hash are stored.
type IdentityToken struct {
	ID    string
	Token string
	Hash  [32]byte
}

// NewIdentityToken issues a random identity token.
func NewIdentityToken() IdentityToken { return NewPrefixedToken(identityPrefix) }

// ParseIdentityToken splits a token into its id and the hash of its secret.
func ParseIdentityToken(token string) (id string, hash [32]byte, err error) {
	return ParsePrefixedToken(identityPrefix, "an identity token", token)
}

// NewPrefixedToken issues a random token of the identity tokens' shape,
// "<prefix><id>.<secret>", for another kind of credential (a user's API
// token is "tka_…"): the prefix tells the kinds apart.
func NewPrefixedToken(prefix string) IdentityToken {
	id := randomString(9)
	secret := randomString(32)
	return IdentityToken{
		ID:    id,
		Token: prefix + id + "." + secret,
		Hash:  sha256.Sum256([]byte(secret)),
	}
}

// ParsePrefixedToken is ParseIdentityToken for a token of NewPrefixedToken;
// what names the kind in the error.
func ParsePrefixedToken(prefix, what, token string) (id string, hash [32]byte, err error) {
	if len(token) > MaxIdentityTokenLen || !strings.HasPrefix(token, prefix) {
		return "", hash, fmt.Errorf("%w: not %s", ErrMalformed, what)
	}
	id, secret, ok := strings.Cut(token[len(prefix):], ".")
	if !ok || !isB64URL(id) || !isB64URL(secret) || len(secret) < 16 {
		return "", hash, fmt.Errorf("%w: not %s", ErrMalformed, what)
	}
	return id, sha256.Sum256([]byte(secret)), nil
}

// RandomID returns a random base64url string of nbytes random bytes: a
// browser session's id, a login's state and nonce.
func RandomID(nbytes int) string { return randomString(nbytes) }

// HashesEqual compares two hashes in constant time.
func HashesEqual(a, b [32]byte) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

func randomString(nbytes int) string {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		panic("trust: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// NewKey returns a random 32-byte HMAC key.
func NewKey() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("trust: crypto/rand failed: " + err.Error())
	}
	return b
}

func isB64URL(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
