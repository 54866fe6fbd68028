package trust

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/talkide/platform/internal/tokenscheme"
)

// WorkerTokens look like "wt1.<kid>.<payload>.<mac>" with payload and mac in
// unpadded base64url; mac = HMAC-SHA256(key[kid], "wt1.<kid>.<payload>").
const workerTokenVersion = "wt1"

// WorkerTokenTTL is the lifetime of a minted WorkerToken.
const WorkerTokenTTL = 120 * time.Second

// workerTokenLifetimeSlack is how much longer than WorkerTokenTTL a token's
// exp-iat may be. Minting sets both from one instant, so the slack only
// lets a minter whose TTL was raised a little, during a rolling update,
// hand out tokens this verifier still takes; it is not a clock allowance
// (MaxClockSkew is).
const workerTokenLifetimeSlack = 5 * time.Second

// MaxWorkerTokenLen bounds what VerifyWorkerToken reads.
const MaxWorkerTokenLen = 2048

// Sentinel errors of token and signature checks.
var (
	ErrBadSignature = errors.New("signature mismatch")
	ErrExpired      = errors.New("credential expired")
	ErrUnknownKey   = errors.New("unknown key id")
	ErrReplayed     = errors.New("request replayed")
	ErrScope        = errors.New("credential not valid for this resource")
)

// WorkerClaims is what a WorkerToken asserts: the bearer may call the model
// for this one conversation of this tenant-env until ExpiresAt.
type WorkerClaims struct {
	Tenant         string `json:"t"`
	Env            string `json:"e"`
	ConversationID string `json:"c"`
	IssuedAt       int64  `json:"iat"`
	ExpiresAt      int64  `json:"exp"`
	ID             string `json:"jti"`
}

// MintWorkerToken signs claims with the key that signs at now (see
// Keyring). IssuedAt, ExpiresAt and ID are set here from now.
func (k *Keyring) MintWorkerToken(tenant, env, conversationID string, now time.Time) (string, WorkerClaims) {
	c := WorkerClaims{
		Tenant:         tenant,
		Env:            env,
		ConversationID: conversationID,
		IssuedAt:       now.Unix(),
		ExpiresAt:      now.Add(WorkerTokenTTL).Unix(),
		ID:             randomString(12),
	}
	payload, err := json.Marshal(c)
	if err != nil {
		panic("trust: marshal claims: " + err.Error())
	}
	key := k.Signing(now)
	head := workerTokenVersion + "." + key.ID + "." + base64.RawURLEncoding.EncodeToString(payload)
	return head + "." + base64.RawURLEncoding.EncodeToString(mac(key.Secret, head)), c
}

// WorkerTokenKeyID returns the key id a well-formed token names, or "".
func WorkerTokenKeyID(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != workerTokenVersion {
		return ""
	}
	return parts[1]
}

// VerifyWorkerToken checks a token's form, signature, lifetime and expiry,
// and returns its claims: iat is required, exp may follow it by no more than
// WorkerTokenTTL (and a few seconds), and iat may be ahead of now by no more
// than MaxClockSkew. The caller still checks that the claims fit the request.
func (k *Keyring) VerifyWorkerToken(token string, now time.Time) (WorkerClaims, error) {
	var c WorkerClaims
	if len(token) > MaxWorkerTokenLen {
		return c, fmt.Errorf("%w: token too long", ErrMalformed)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != workerTokenVersion || !tokenscheme.IsBase64URL(parts[1]) || !tokenscheme.IsBase64URL(parts[2]) || !tokenscheme.IsBase64URL(parts[3]) {
		return c, fmt.Errorf("%w: not a worker token", ErrMalformed)
	}
	// The token names its key: no other key is ever tried.
	key, err := k.Verifying(parts[1], now)
	if err != nil {
		return c, err
	}
	got, err := base64.RawURLEncoding.Strict().DecodeString(parts[3])
	if err != nil {
		return c, fmt.Errorf("%w: bad signature encoding", ErrMalformed)
	}
	if !hmac.Equal(got, mac(key, parts[0]+"."+parts[1]+"."+parts[2])) {
		return c, ErrBadSignature
	}
	payload, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil {
		return c, fmt.Errorf("%w: bad payload encoding", ErrMalformed)
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return WorkerClaims{}, fmt.Errorf("%w: bad payload", ErrMalformed)
	}
	if c.Tenant == "" || c.Env == "" || c.ConversationID == "" || c.ExpiresAt == 0 || c.IssuedAt <= 0 {
		return WorkerClaims{}, fmt.Errorf("%w: incomplete claims", ErrMalformed)
	}
	if now.Unix() >= c.ExpiresAt {
		return WorkerClaims{}, ErrExpired
	}
	// A token from the future beyond clock skew was not minted by us today.
	if c.IssuedAt > now.Add(MaxClockSkew).Unix() {
		return WorkerClaims{}, ErrExpired
	}
	// A signed token is only as short-lived as its claims say: one that a
	// leaked or misused key signed with exp in 2100 must not live that
	// long. Only what MintWorkerToken writes passes: exp after iat, by no
	// more than the TTL. (iat > 0 keeps exp-iat from overflowing.)
	if c.ExpiresAt <= c.IssuedAt || c.ExpiresAt-c.IssuedAt > int64((WorkerTokenTTL+workerTokenLifetimeSlack)/time.Second) {
		return WorkerClaims{}, fmt.Errorf("%w: lifetime is not the minted one", ErrMalformed)
	}
	return c, nil
}

func mac(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}
