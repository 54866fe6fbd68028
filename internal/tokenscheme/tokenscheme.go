// Package tokenscheme provides the shape that the platform's bearer tokens
// share: "<prefix><id>.<secret>", with a random id that finds the stored
// record and a random secret of which only the SHA-256 is stored. The
// prefix tells the families apart (identity, API and operator tokens), so a
// token of one family is never taken for another.
//
// A high-entropy random secret needs no slow hash: nothing can be guessed
// from its digest. No error of this package holds a token or a secret.
package tokenscheme

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"
	"time"
)

// MaxLen bounds the tokens Parse reads: far above an issued token's length
// (60 bytes or so), far below what would make parsing a cost.
const MaxLen = 256

// MaxIDLen bounds a token's id, as ValidID checks it.
const MaxIDLen = 64

// Sizes of what Issue draws. The secret's 256 bits are what makes a fast
// hash enough; a parsed secret may be shorter (minSecretLen) so that tokens
// issued by hand or by tests of other sizes keep working.
const (
	idBytes      = 9
	secretBytes  = 32
	minSecretLen = 16
)

// Why a presented token was refused. Every error Verify returns for a
// token's fault wraps ErrInvalid and one of these.
var (
	ErrInvalid     = errors.New("token not valid")
	ErrMalformed   = errors.New("malformed credential")
	ErrUnknown     = errors.New("unknown id")
	ErrWrongSecret = errors.New("wrong secret")
	ErrRevoked     = errors.New("revoked")
	ErrExpired     = errors.New("expired")
)

// Error is a presented token's fault. It names the family and, once the
// token parsed, its id (which is not a secret); never the token.
type Error struct {
	Kind   string // the family, e.g. "API token"
	ID     string // "" when the token did not parse
	Reason error  // ErrMalformed, ErrUnknown, ErrWrongSecret, ErrRevoked or ErrExpired
}

func (e *Error) Error() string {
	if e.ID == "" {
		return e.Kind + ": " + e.Reason.Error()
	}
	return e.Kind + " " + e.ID + ": " + e.Reason.Error()
}

// Unwrap makes both errors.Is(err, ErrInvalid) and errors.Is(err,
// e.Reason) hold.
func (e *Error) Unwrap() []error { return []error{ErrInvalid, e.Reason} }

// Scheme is one family of tokens: its prefix and the name its errors use.
type Scheme struct {
	prefix string
	kind   string
}

// New returns the scheme of tokens that begin with prefix. The prefix must
// be lower-case letters and end in '_' (say "tka_"), so that it can neither
// be mistaken for part of an id nor hold the '.' that ends one; a bad prefix
// is a programming error and panics.
func New(prefix, kind string) Scheme {
	body, ok := strings.CutSuffix(prefix, "_")
	if !ok || body == "" || strings.Trim(body, "abcdefghijklmnopqrstuvwxyz") != "" {
		panic("tokenscheme: bad prefix " + prefix)
	}
	return Scheme{prefix: prefix, kind: kind}
}

// Prefix is what every token of the scheme begins with.
func (s Scheme) Prefix() string { return s.prefix }

// Issued is a freshly issued token. Token is shown once, to whoever gets
// it; only ID and Hash are stored.
type Issued struct {
	ID    string
	Token string
	Hash  [32]byte
}

// Issue draws a new random token.
func (s Scheme) Issue() Issued {
	id, secret := random(idBytes), random(secretBytes)
	return Issued{ID: id, Token: s.prefix + id + "." + secret, Hash: HashSecret(secret)}
}

// HashSecret is how a token's secret is kept: its SHA-256.
func HashSecret(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// Presented is a token as a client sent it, parsed: its id and the hash of
// its secret. The secret itself is not kept.
type Presented struct {
	ID   string
	Hash [32]byte
}

// Parse checks the form of a presented token and splits it. The id and the
// secret must be non-empty base64url; the secret at least 16 characters.
func (s Scheme) Parse(token string) (Presented, error) {
	if len(token) > MaxLen || !strings.HasPrefix(token, s.prefix) {
		return Presented{}, &Error{Kind: s.kind, Reason: ErrMalformed}
	}
	id, secret, ok := strings.Cut(token[len(s.prefix):], ".")
	if !ok || !ValidID(id) || !IsBase64URL(secret) || len(secret) < minSecretLen {
		return Presented{}, &Error{Kind: s.kind, Reason: ErrMalformed}
	}
	return Presented{ID: id, Hash: HashSecret(secret)}, nil
}

// Matches compares the presented secret's hash with a stored one in
// constant time.
func (p Presented) Matches(stored [32]byte) bool { return HashesEqual(p.Hash, stored) }

// HashesEqual compares two hashes in constant time.
func HashesEqual(a, b [32]byte) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

// Stored is what a family keeps of a token for Verify.
type Stored struct {
	Hash      [32]byte
	RevokedAt time.Time // zero: not revoked
	ExpiresAt time.Time // zero: never
}

// Lookup finds the stored token with id. found is false when there is none;
// err is a failure to look, which Verify returns as it is.
type Lookup[R any] func(id string) (rec R, stored Stored, found bool, err error)

// Verify checks a presented token against what lookup finds by its id: the
// secret's hash must match (compared in constant time, also for an unknown
// id, so that timing does not tell the two apart), and at now the token
// must be neither revoked nor expired. A token's fault is an *Error.
func Verify[R any](s Scheme, token string, now time.Time, lookup Lookup[R]) (R, error) {
	var zero R
	p, err := s.Parse(token)
	if err != nil {
		return zero, err
	}
	rec, st, found, err := lookup(p.ID)
	if err != nil {
		return zero, err
	}
	fail := func(reason error) (R, error) { return zero, &Error{Kind: s.kind, ID: p.ID, Reason: reason} }
	match := p.Matches(st.Hash)
	switch {
	case !found:
		return fail(ErrUnknown)
	case !match:
		return fail(ErrWrongSecret)
	case !st.RevokedAt.IsZero() && !now.Before(st.RevokedAt):
		return fail(ErrRevoked)
	case !st.ExpiresAt.IsZero() && !now.Before(st.ExpiresAt):
		return fail(ErrExpired)
	}
	return rec, nil
}

// ValidID reports whether id has the shape of a token's id: 1 to MaxIDLen
// base64url characters. Looking up or revoking by something else is
// refused before it reaches a store or a log, where a whole token pasted by
// mistake must never go.
func ValidID(id string) bool { return len(id) <= MaxIDLen && IsBase64URL(id) }

// IsBase64URL reports whether s is non-empty and spelt in unpadded
// base64url, the alphabet of every part of a token (and of the other
// credentials' ids, which share it).
func IsBase64URL(s string) bool {
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

func random(nbytes int) string {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		panic("tokenscheme: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
