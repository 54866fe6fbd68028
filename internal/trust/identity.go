package trust

import (
	"crypto/rand"
	"encoding/base64"

	"github.com/talkide/platform/internal/tokenscheme"
)

// IdentityTokens are the scheme of identity tokens, "tki_<id>.<secret>":
// one per tenant-env, the credential a worker mints WorkerTokens with.
var IdentityTokens = tokenscheme.New("tki_", "identity token")

// ErrMalformed is returned for a token or signature that cannot be parsed.
var ErrMalformed = tokenscheme.ErrMalformed

// IdentityToken is a freshly issued identity token. Token goes to the worker
// once; only ID and Hash are stored.
type IdentityToken = tokenscheme.Issued

// NewIdentityToken issues a random identity token.
func NewIdentityToken() IdentityToken { return IdentityTokens.Issue() }

// ParseIdentityToken splits a token into its id and the hash of its secret.
func ParseIdentityToken(token string) (id string, hash [32]byte, err error) {
	p, err := IdentityTokens.Parse(token)
	return p.ID, p.Hash, err
}

// RandomID returns a random base64url string of nbytes random bytes: a
// browser session's id, a login's state and nonce.
func RandomID(nbytes int) string { return randomString(nbytes) }

// HashesEqual compares two hashes in constant time.
func HashesEqual(a, b [32]byte) bool { return tokenscheme.HashesEqual(a, b) }

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
