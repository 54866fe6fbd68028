package trust

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/tokenscheme"
)

// SignatureHeader carries a request signature in both directions of the seam.
const SignatureHeader = "X-Worker-Token"

// MaxClockSkew is how far a signature's timestamp may be from the verifier's
// clock, either way. Nonces are remembered for twice this long.
const MaxClockSkew = 60 * time.Second

// MaxSignatureLen bounds what ParseSignature reads.
const MaxSignatureLen = 512

// Direction is signed into every request so that a signature made for one
// direction cannot be reflected back in the other.
type Direction string

// Directions of the seam.
const (
	ToWorker       Direction = "cp-to-worker"
	ToControlPlane Direction = "worker-to-cp"
)

// DeriveEnvKey derives the signing key of one tenant-env from the
// control-plane's master secret. The worker receives only its own derived
// key, so a signature for one tenant-env is worthless at another.
func DeriveEnvKey(master []byte, tenant, env string) []byte {
	return mac(master, "talkide env signing key v1\x00"+tenant+"\x00"+env)
}

// Signature is a parsed X-Worker-Token header value:
//
//	v1;kid=<key id>;t=<tenant>;e=<env>;ts=<unix seconds>;n=<nonce>;sig=<base64url mac>
type Signature struct {
	KeyID     string
	Tenant    string
	Env       string
	Timestamp int64
	Nonce     string
	MAC       []byte
}

// ParseSignature parses a header value without checking it.
func ParseSignature(v string) (Signature, error) {
	var s Signature
	if len(v) > MaxSignatureLen {
		return s, fmt.Errorf("%w: signature too long", ErrMalformed)
	}
	fields := strings.Split(v, ";")
	if len(fields) != 7 || fields[0] != "v1" {
		return s, fmt.Errorf("%w: not a v1 signature", ErrMalformed)
	}
	seen := 0
	for _, f := range fields[1:] {
		k, val, ok := strings.Cut(f, "=")
		if !ok || val == "" {
			return Signature{}, fmt.Errorf("%w: bad signature field", ErrMalformed)
		}
		var bit int
		switch k {
		case "kid":
			bit, s.KeyID = 1, val
		case "t":
			bit, s.Tenant = 2, val
		case "e":
			bit, s.Env = 4, val
		case "ts":
			bit = 8
			ts, err := strconv.ParseInt(val, 10, 64)
			if err != nil || ts <= 0 {
				return Signature{}, fmt.Errorf("%w: bad timestamp", ErrMalformed)
			}
			s.Timestamp = ts
		case "n":
			bit, s.Nonce = 16, val
		case "sig":
			bit = 32
			m, err := base64.RawURLEncoding.Strict().DecodeString(val)
			if err != nil || len(m) != sha256.Size {
				return Signature{}, fmt.Errorf("%w: bad mac", ErrMalformed)
			}
			s.MAC = m
		default:
			return Signature{}, fmt.Errorf("%w: unknown signature field", ErrMalformed)
		}
		if seen&bit != 0 {
			return Signature{}, fmt.Errorf("%w: repeated signature field", ErrMalformed)
		}
		seen |= bit
	}
	for _, f := range []string{s.KeyID, s.Tenant, s.Env, s.Nonce} {
		if !tokenscheme.IsBase64URL(f) || len(f) > 64 {
			return Signature{}, fmt.Errorf("%w: bad signature field value", ErrMalformed)
		}
	}
	return s, nil
}

func (s Signature) String() string {
	return "v1;kid=" + s.KeyID + ";t=" + s.Tenant + ";e=" + s.Env + ";ts=" + strconv.FormatInt(s.Timestamp, 10) +
		";n=" + s.Nonce + ";sig=" + base64.RawURLEncoding.EncodeToString(s.MAC)
}

func canonical(dir Direction, s Signature, method, pathAndQuery string, body []byte) string {
	sum := sha256.Sum256(body)
	return strings.Join([]string{
		"talkide-signature-v1", string(dir), s.KeyID, s.Tenant, s.Env,
		strconv.FormatInt(s.Timestamp, 10), s.Nonce,
		method, pathAndQuery, hex.EncodeToString(sum[:]),
	}, "\n")
}

// Signer signs requests of one tenant-env in one direction.
type Signer struct {
	Direction Direction
	Tenant    string
	Env       string
	KeyID     string
	Key       []byte
	// Ring, when set, replaces KeyID and Key: each request is signed with
	// the ring's signing key at that moment, so a rotated key takes over
	// without a new Signer.
	Ring *Keyring
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Sign sets the signature header of r, whose body is body (nil for none).
func (sg *Signer) Sign(r *http.Request, body []byte) {
	now := time.Now
	if sg.Now != nil {
		now = sg.Now
	}
	t := now()
	kid, key := sg.KeyID, sg.Key
	if sg.Ring != nil {
		k := sg.Ring.Signing(t)
		kid, key = k.ID, k.Secret
	}
	s := Signature{KeyID: kid, Tenant: sg.Tenant, Env: sg.Env, Timestamp: t.Unix(), Nonce: randomString(16)}
	s.MAC = mac(key, canonical(sg.Direction, s, r.Method, r.URL.RequestURI(), body))
	r.Header.Set(SignatureHeader, s.String())
}

// KeyLookup returns the key of a tenant-env and key id, or false.
type KeyLookup func(tenant, env, keyID string) ([]byte, bool)

// Verifier checks signatures of one direction, rejecting replays.
type Verifier struct {
	direction Direction
	keys      KeyLookup
	now       func() time.Time

	mu sync.Mutex
	// guarded by mu: one nonce cache per tenant-env, so that one signer
	// filling its cache cannot block the others.
	nonces map[string]*nonceCache
}

// noncesPerEnv bounds the nonces remembered for one tenant-env: more than
// 2,000 signed requests a second sustained over the 120 s window.
const noncesPerEnv = 1 << 18

// NewVerifier returns a verifier for requests travelling in dir. now may be
// nil (time.Now).
func NewVerifier(dir Direction, keys KeyLookup, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{direction: dir, keys: keys, now: now, nonces: make(map[string]*nonceCache)}
}

// Principal is who signed a verified request.
type Principal struct {
	Tenant string
	Env    string
}

// Verify checks r's signature over body. It checks the MAC before the nonce,
// so an attacker cannot fill the nonce cache with unsigned requests.
func (v *Verifier) Verify(r *http.Request, body []byte) (Principal, error) {
	h := r.Header.Get(SignatureHeader)
	if h == "" {
		return Principal{}, fmt.Errorf("%w: missing %s", ErrMalformed, SignatureHeader)
	}
	s, err := ParseSignature(h)
	if err != nil {
		return Principal{}, err
	}
	key, ok := v.keys(s.Tenant, s.Env, s.KeyID)
	if !ok {
		return Principal{}, ErrUnknownKey
	}
	if !hmac.Equal(s.MAC, mac(key, canonical(v.direction, s, r.Method, r.URL.RequestURI(), body))) {
		return Principal{}, ErrBadSignature
	}
	now := v.now()
	skew := now.Sub(time.Unix(s.Timestamp, 0))
	if skew > MaxClockSkew || skew < -MaxClockSkew {
		return Principal{}, ErrExpired
	}
	if !v.nonceCache(s.Tenant, s.Env).add(s.Nonce, now) {
		return Principal{}, ErrReplayed
	}
	return Principal{Tenant: s.Tenant, Env: s.Env}, nil
}

func (v *Verifier) nonceCache(tenant, env string) *nonceCache {
	v.mu.Lock()
	defer v.mu.Unlock()
	key := tenant + "/" + env
	c, ok := v.nonces[key]
	if !ok {
		c = newNonceCache(noncesPerEnv)
		v.nonces[key] = c
	}
	return c
}

// nonceCache remembers nonces for 2×MaxClockSkew: a signature older than that
// fails the timestamp check anyway. When full it refuses new nonces (fails
// closed) rather than forgetting ones still inside the window.
type nonceCache struct {
	max int
	mu  sync.Mutex
	// guarded by mu
	seen      map[string]time.Time // nonce → when it may be forgotten
	lastPrune time.Time
}

func newNonceCache(max int) *nonceCache {
	return &nonceCache{max: max, seen: make(map[string]time.Time)}
}

func (c *nonceCache) add(nonce string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.lastPrune) > MaxClockSkew/4 || len(c.seen) >= c.max {
		for n, exp := range c.seen {
			if now.After(exp) {
				delete(c.seen, n)
			}
		}
		c.lastPrune = now
	}
	if _, dup := c.seen[nonce]; dup {
		return false
	}
	if len(c.seen) >= c.max {
		return false
	}
	c.seen[nonce] = now.Add(2 * MaxClockSkew)
	return true
}
