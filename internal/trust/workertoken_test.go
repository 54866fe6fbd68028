package trust

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// t0 is the reference time of the tests: whole seconds, so that Unix
// truncation never blurs a boundary.
var t0 = time.Unix(1_700_000_000, 0)

// testKey is a recognisable 32-byte key, so tests can look for it in errors.
func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

var (
	key1 = testKey(0x11)
	key2 = testKey(0x22)
)

func newKeyring(t testing.TB, current string, keys map[string][]byte) *Keyring {
	t.Helper()
	k, err := NewKeyring(current, keys)
	if err != nil {
		t.Fatalf("NewKeyring(%q): %v", current, err)
	}
	return k
}

// signToken builds a WorkerToken from a raw payload, signed with key: the
// only way to reach the checks behind the MAC with claims MintWorkerToken
// would never write.
func signToken(key []byte, kid, payload string) string {
	head := workerTokenVersion + "." + kid + "." + payload
	return head + "." + base64.RawURLEncoding.EncodeToString(mac(key, head))
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func claimsJSON(t testing.TB, c WorkerClaims) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// assertNoSecret fails if msg holds the token, a part of it, or a key.
func assertNoSecret(t testing.TB, msg, token string, keys ...[]byte) {
	t.Helper()
	var secrets []string
	if len(token) >= 8 {
		secrets = append(secrets, token)
	}
	for _, p := range strings.Split(token, ".") {
		if len(p) >= 8 {
			secrets = append(secrets, p)
		}
	}
	for _, k := range keys {
		secrets = append(secrets, string(k), hex.EncodeToString(k),
			base64.RawURLEncoding.EncodeToString(k), base64.StdEncoding.EncodeToString(k))
	}
	for _, s := range secrets {
		if strings.Contains(msg, s) {
			t.Errorf("error %q contains a secret (%.12q…)", msg, s)
		}
	}
}

func TestWorkerTokenRoundTrip(t *testing.T) {
	kr := newKeyring(t, "k1", map[string][]byte{"k1": key1})
	token, minted := kr.MintWorkerToken("acme", "prod", "c_123", t0)

	if !strings.HasPrefix(token, "wt1.k1.") {
		t.Errorf("token %.20q… does not start with wt1.k1.", token)
	}
	want := WorkerClaims{
		Tenant: "acme", Env: "prod", ConversationID: "c_123",
		IssuedAt: t0.Unix(), ExpiresAt: t0.Add(WorkerTokenTTL).Unix(), ID: minted.ID,
	}
	if diff := cmp.Diff(want, minted); diff != "" {
		t.Errorf("minted claims (-want +got):\n%s", diff)
	}
	if len(minted.ID) < 16 {
		t.Errorf("jti %q is too short to be unique", minted.ID)
	}
	for _, at := range []time.Time{
		t0,
		t0.Add(-MaxClockSkew),                    // verifier clock behind the minter's
		t0.Add(WorkerTokenTTL - time.Nanosecond), // last instant of validity
	} {
		got, err := kr.VerifyWorkerToken(token, at)
		if err != nil {
			t.Fatalf("VerifyWorkerToken at t0%+v: %v", at.Sub(t0), err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("verified claims at t0%+v (-want +got):\n%s", at.Sub(t0), diff)
		}
	}
}

func TestWorkerTokensUnique(t *testing.T) {
	kr := newKeyring(t, "k1", map[string][]byte{"k1": key1})
	seen := make(map[string]bool)
	for range 500 {
		token, c := kr.MintWorkerToken("acme", "prod", "c_1", t0)
		if seen[token] || seen[c.ID] {
			t.Fatal("two tokens minted with the same claims and time are equal")
		}
		seen[token], seen[c.ID] = true, true
	}
}

func TestVerifyWorkerTokenRejects(t *testing.T) {
	kr := newKeyring(t, "k1", map[string][]byte{"k1": key1, "k2": key2})
	good, claims := kr.MintWorkerToken("acme", "prod", "c_123", t0)
	parts := strings.Split(good, ".")
	if len(parts) != 4 {
		t.Fatalf("minted token has %d parts", len(parts))
	}
	join := func(p ...string) string { return strings.Join(p, ".") }
	future, _ := kr.MintWorkerToken("acme", "prod", "c_123", t0.Add(MaxClockSkew+time.Second))
	otherConv := claims
	otherConv.ConversationID = "c_999"
	otherTenant := claims
	otherTenant.Tenant = "globex"
	// flip changes the first character of a base64url part, which always
	// changes the decoded bytes (the last character may carry only padding bits).
	flip := func(s string) string {
		if s[0] == 'A' {
			return "B" + s[1:]
		}
		return "A" + s[1:]
	}
	full := func(mut func(*WorkerClaims)) string {
		c := claims
		mut(&c)
		return signToken(key1, "k1", b64(claimsJSON(t, c)))
	}

	tests := map[string]struct {
		token string
		now   time.Time
		want  error
	}{
		"expired":                  {good, t0.Add(WorkerTokenTTL + time.Second), ErrExpired},
		"exactly at exp":           {good, t0.Add(WorkerTokenTTL), ErrExpired},
		"long expired":             {good, t0.Add(24 * time.Hour), ErrExpired},
		"issued beyond clock skew": {future, t0, ErrExpired},
		"exp zero":                 {full(func(c *WorkerClaims) { c.ExpiresAt = 0 }), t0, ErrMalformed},
		"exp in the past, signed":  {full(func(c *WorkerClaims) { c.ExpiresAt = t0.Unix() - 1 }), t0, ErrExpired},
		// A signed token lives no longer than a minted one, whatever its
		// exp says: a key that signed one claim of 2100 must not have
		// made a credential for 75 years.
		"exp in 2100, signed":            {full(func(c *WorkerClaims) { c.ExpiresAt = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix() }), t0, ErrMalformed},
		"exp max int64, signed":          {full(func(c *WorkerClaims) { c.ExpiresAt = math.MaxInt64 }), t0, ErrMalformed},
		"no iat, signed":                 {full(func(c *WorkerClaims) { c.IssuedAt = 0 }), t0, ErrMalformed},
		"no iat in the JSON, signed":     {signToken(key1, "k1", b64(fmt.Sprintf(`{"t":"acme","e":"prod","c":"c_123","exp":%d,"jti":"x"}`, t0.Unix()+60))), t0, ErrMalformed},
		"negative iat, signed":           {full(func(c *WorkerClaims) { c.IssuedAt = -1 }), t0, ErrMalformed},
		"iat min int64, exp max (wraps)": {full(func(c *WorkerClaims) { c.IssuedAt, c.ExpiresAt = math.MinInt64, math.MaxInt64 }), t0, ErrMalformed},
		"exp equal to iat, signed":       {full(func(c *WorkerClaims) { c.IssuedAt += 10; c.ExpiresAt = c.IssuedAt }), t0, ErrMalformed},
		"exp before iat, signed":         {full(func(c *WorkerClaims) { c.IssuedAt += 10; c.ExpiresAt = c.IssuedAt - 1 }), t0, ErrMalformed},
		"lifetime one second too long": {full(func(c *WorkerClaims) {
			c.ExpiresAt = c.IssuedAt + int64((WorkerTokenTTL+workerTokenLifetimeSlack)/time.Second) + 1
		}), t0, ErrMalformed},
		"old iat, long exp, signed":        {full(func(c *WorkerClaims) { c.IssuedAt = t0.Unix() - 3600; c.ExpiresAt = t0.Unix() + 60 }), t0, ErrMalformed},
		"iat a day ahead, minted lifetime": {full(func(c *WorkerClaims) { c.IssuedAt += 86400; c.ExpiresAt += 86400 }), t0, ErrExpired},
		"tampered payload: conversation":   {join(parts[0], parts[1], b64(claimsJSON(t, otherConv)), parts[3]), t0, ErrBadSignature},
		"tampered payload: tenant":         {join(parts[0], parts[1], b64(claimsJSON(t, otherTenant)), parts[3]), t0, ErrBadSignature},
		"tampered payload: one character":  {join(parts[0], parts[1], flip(parts[2]), parts[3]), t0, ErrBadSignature},
		"tampered mac":                     {join(parts[0], parts[1], parts[2], flip(parts[3])), t0, ErrBadSignature},
		"mac truncated":                    {join(parts[0], parts[1], parts[2], parts[3][:40]), t0, ErrBadSignature},
		"mac of another key":               {signToken(key2, "k1", parts[2]), t0, ErrBadSignature},
		"kid swapped to another known key": {join(parts[0], "k2", parts[2], parts[3]), t0, ErrBadSignature},
		"unknown key id":                   {join(parts[0], "k9", parts[2], parts[3]), t0, ErrUnknownKey},
		"unknown key id, self-signed":      {signToken(testKey(0x99), "k9", parts[2]), t0, ErrUnknownKey},
		"tampered version":                 {join("wt2", parts[1], parts[2], parts[3]), t0, ErrMalformed},
		"upper-case version":               {join("WT1", parts[1], parts[2], parts[3]), t0, ErrMalformed},
		"empty":                            {"", t0, ErrMalformed},
		"three parts":                      {join(parts[0], parts[1], parts[2]), t0, ErrMalformed},
		"five parts":                       {good + ".x", t0, ErrMalformed},
		"trailing dot":                     {good + ".", t0, ErrMalformed},
		"empty kid":                        {join(parts[0], "", parts[2], parts[3]), t0, ErrMalformed},
		"empty payload":                    {join(parts[0], parts[1], "", parts[3]), t0, ErrMalformed},
		"empty mac":                        {join(parts[0], parts[1], parts[2], ""), t0, ErrMalformed},
		"std base64 in payload":            {join(parts[0], parts[1], parts[2]+"+/", parts[3]), t0, ErrMalformed},
		"padding on mac":                   {good + "=", t0, ErrMalformed},
		"mac not decodable":                {join(parts[0], parts[1], parts[2], parts[3]+"AA"), t0, ErrMalformed},
		"payload not decodable, signed":    {signToken(key1, "k1", "A"), t0, ErrMalformed},
		"payload not JSON, signed":         {signToken(key1, "k1", b64("not json")), t0, ErrMalformed},
		"payload JSON array, signed":       {signToken(key1, "k1", b64("[]")), t0, ErrMalformed},
		"payload null, signed":             {signToken(key1, "k1", b64("null")), t0, ErrMalformed},
		"payload empty object, signed":     {signToken(key1, "k1", b64("{}")), t0, ErrMalformed},
		"payload wrong types, signed":      {signToken(key1, "k1", b64(`{"t":1,"e":2,"c":3,"exp":"soon"}`)), t0, ErrMalformed},
		"missing tenant":                   {full(func(c *WorkerClaims) { c.Tenant = "" }), t0, ErrMalformed},
		"missing env":                      {full(func(c *WorkerClaims) { c.Env = "" }), t0, ErrMalformed},
		"missing conversation":             {full(func(c *WorkerClaims) { c.ConversationID = "" }), t0, ErrMalformed},
		"too long":                         {good + strings.Repeat("A", MaxWorkerTokenLen), t0, ErrMalformed},
		"too long, validly signed": {
			signToken(key1, "k1", b64(claimsJSON(t, WorkerClaims{Tenant: "acme", Env: "prod",
				ConversationID: strings.Repeat("c", MaxWorkerTokenLen), IssuedAt: t0.Unix(), ExpiresAt: t0.Unix() + 60}))), t0, ErrMalformed,
		},
		"bearer prefix": {"Bearer " + good, t0, ErrMalformed},
		"whitespace":    {good + "\n", t0, ErrMalformed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := kr.VerifyWorkerToken(tc.token, tc.now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if diff := cmp.Diff(WorkerClaims{}, got); diff != "" {
				t.Errorf("a rejected token returned claims (-want +got):\n%s", diff)
			}
			assertNoSecret(t, err.Error(), tc.token, key1, key2)
		})
	}
}

func TestVerifyWorkerTokenClockSkewEdge(t *testing.T) {
	kr := newKeyring(t, "k1", map[string][]byte{"k1": key1})
	atEdge, _ := kr.MintWorkerToken("acme", "prod", "c_1", t0.Add(MaxClockSkew))
	if _, err := kr.VerifyWorkerToken(atEdge, t0); err != nil {
		t.Errorf("token issued exactly MaxClockSkew ahead: %v", err)
	}
	beyond, _ := kr.MintWorkerToken("acme", "prod", "c_1", t0.Add(MaxClockSkew+time.Second))
	if _, err := kr.VerifyWorkerToken(beyond, t0); !errors.Is(err, ErrExpired) {
		t.Errorf("token issued MaxClockSkew+1s ahead: err = %v, want ErrExpired", err)
	}
}

// The longest lifetime a minter may write, and tokens of the lifetime
// MintWorkerToken writes at every instant of their validity, still verify.
func TestVerifyWorkerTokenLifetimeEdge(t *testing.T) {
	kr := newKeyring(t, "k1", map[string][]byte{"k1": key1})
	longest := WorkerClaims{Tenant: "acme", Env: "prod", ConversationID: "c_1", IssuedAt: t0.Unix(),
		ExpiresAt: t0.Add(WorkerTokenTTL + workerTokenLifetimeSlack).Unix(), ID: "x"}
	tok := signToken(key1, "k1", b64(claimsJSON(t, longest)))
	for _, at := range []time.Duration{0, WorkerTokenTTL, WorkerTokenTTL + workerTokenLifetimeSlack - time.Second} {
		if _, err := kr.VerifyWorkerToken(tok, t0.Add(at)); err != nil {
			t.Errorf("token of the longest lifetime at t0+%v: %v", at, err)
		}
	}
	minted, _ := kr.MintWorkerToken("acme", "prod", "c_1", t0.Add(500*time.Millisecond))
	if _, err := kr.VerifyWorkerToken(minted, t0.Add(500*time.Millisecond)); err != nil {
		t.Errorf("token minted at a fractional second: %v", err)
	}
}

func TestKeyRotation(t *testing.T) {
	old := newKeyring(t, "k1", map[string][]byte{"k1": key1})
	tokK1, _ := old.MintWorkerToken("acme", "prod", "c_1", t0)

	rotating := newKeyring(t, "k2", map[string][]byte{"k1": key1, "k2": key2})
	if got := rotating.CurrentKeyID(); got != "k2" {
		t.Fatalf("CurrentKeyID = %q, want k2", got)
	}
	if _, err := rotating.VerifyWorkerToken(tokK1, t0); err != nil {
		t.Errorf("k1 token on a keyring that still holds k1: %v", err)
	}
	tokK2, _ := rotating.MintWorkerToken("acme", "prod", "c_1", t0)
	if !strings.HasPrefix(tokK2, "wt1.k2.") {
		t.Errorf("rotated keyring mints with %.7q, want wt1.k2.", tokK2)
	}
	if _, err := rotating.VerifyWorkerToken(tokK2, t0); err != nil {
		t.Errorf("k2 token on the rotating keyring: %v", err)
	}
	// A replica that has not rotated in k2 yet cannot check k2 tokens.
	if _, err := old.VerifyWorkerToken(tokK2, t0); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("k2 token on a k1-only keyring: err = %v, want ErrUnknownKey", err)
	}

	rotated := newKeyring(t, "k2", map[string][]byte{"k2": key2})
	if _, err := rotated.VerifyWorkerToken(tokK1, t0); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("k1 token after k1 was dropped: err = %v, want ErrUnknownKey", err)
	}
	if _, err := rotated.VerifyWorkerToken(tokK2, t0); err != nil {
		t.Errorf("k2 token after k1 was dropped: %v", err)
	}

	// Reusing a key id for new key material invalidates the old tokens.
	reused := newKeyring(t, "k1", map[string][]byte{"k1": testKey(0x33)})
	if _, err := reused.VerifyWorkerToken(tokK1, t0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("k1 token on a keyring whose k1 is another key: err = %v, want ErrBadSignature", err)
	}
}

func TestNewKeyring(t *testing.T) {
	long := strings.Repeat("k", 32)
	tests := map[string]struct {
		current string
		keys    map[string][]byte
		wantErr bool
	}{
		"one key":                  {"k1", map[string][]byte{"k1": key1}, false},
		"two keys":                 {"k2", map[string][]byte{"k1": key1, "k2": key2}, false},
		"32-char key id":           {long, map[string][]byte{long: key1}, false},
		"key longer than 32 bytes": {"k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 64)}, false},
		"base64url key id":         {"a-_Z9", map[string][]byte{"a-_Z9": key1}, false},
		"missing current":          {"k3", map[string][]byte{"k1": key1, "k2": key2}, true},
		"empty current":            {"", map[string][]byte{"k1": key1}, true},
		"nil keys":                 {"k1", nil, true},
		"short current key":        {"k1", map[string][]byte{"k1": key1[:31]}, true},
		"short other key":          {"k1", map[string][]byte{"k1": key1, "k2": key2[:16]}, true},
		"empty key":                {"k1", map[string][]byte{"k1": {}}, true},
		"nil key":                  {"k1", map[string][]byte{"k1": nil}, true},
		"empty key id":             {"", map[string][]byte{"": key1}, true},
		"key id with dot":          {"k.1", map[string][]byte{"k.1": key1}, true},
		"key id with space":        {"k 1", map[string][]byte{"k 1": key1}, true},
		"key id with slash":        {"k/1", map[string][]byte{"k/1": key1}, true},
		"33-char key id":           {long + "k", map[string][]byte{long + "k": key1}, true},
		"bad other key id":         {"k1", map[string][]byte{"k1": key1, "k.2": key2}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			k, err := NewKeyring(tc.current, tc.keys)
			if tc.wantErr {
				if err == nil {
					t.Fatal("NewKeyring succeeded, want an error")
				}
				if k != nil {
					t.Error("NewKeyring returned a keyring with its error")
				}
				assertNoSecret(t, err.Error(), "", key1, key2, key1[:31], key2[:16])
				return
			}
			if err != nil {
				t.Fatalf("NewKeyring: %v", err)
			}
			if k.CurrentKeyID() != tc.current {
				t.Errorf("CurrentKeyID = %q, want %q", k.CurrentKeyID(), tc.current)
			}
			tok, _ := k.MintWorkerToken("acme", "prod", "c_1", t0)
			if _, err := k.VerifyWorkerToken(tok, t0); err != nil {
				t.Errorf("round trip: %v", err)
			}
		})
	}
}

func TestKeyringCopiesKeys(t *testing.T) {
	key := testKey(0x44)
	keys := map[string][]byte{"k1": key}
	kr := newKeyring(t, "k1", keys)
	tok, _ := kr.MintWorkerToken("acme", "prod", "c_1", t0)
	key[0] ^= 0xff
	keys["k1"] = testKey(0x55)
	keys["k2"] = key2
	if _, err := kr.VerifyWorkerToken(tok, t0); err != nil {
		t.Errorf("changing the caller's key map changed the keyring: %v", err)
	}
}

func FuzzVerifyWorkerToken(f *testing.F) {
	kr := newKeyring(f, "k1", map[string][]byte{"k1": key1, "k2": key2})
	now := t0.Add(10 * time.Second)
	minted, claims := kr.MintWorkerToken("acme", "prod", "c_123", t0)
	payload := claimsJSON(f, claims)
	f.Add(minted, []byte(payload))
	f.Add(signToken(key2, "k2", b64(payload)), []byte(`{"t":"a","e":"b","c":"c","exp":1700000100,"iat":1700000000,"jti":"x"}`))
	f.Add("wt1.k1.e30.AAAA", []byte(`{}`))
	f.Add("wt1.k9.e30.AAAA", []byte(`null`))
	f.Add("wt1...", []byte(`{"t":"a","e":"b","c":"c","exp":1}`))
	f.Add("", []byte(`{"t":"a","e":"b","c":"c","exp":9223372036854775807,"iat":-9223372036854775808}`))
	f.Add(strings.Repeat("A", MaxWorkerTokenLen+1), []byte(`{"T":"a","E":"b","C":"c","EXP":1700000100,"t":""}`))
	f.Fuzz(func(t *testing.T, token string, payload []byte) {
		check := func(token string, signed bool) {
			c, err := kr.VerifyWorkerToken(token, now)
			if err != nil {
				if diff := cmp.Diff(WorkerClaims{}, c); diff != "" {
					t.Fatalf("rejected token returned claims (-want +got):\n%s", diff)
				}
				sentinel := errors.Is(err, ErrMalformed) || errors.Is(err, ErrExpired) ||
					errors.Is(err, ErrUnknownKey) || errors.Is(err, ErrBadSignature)
				if !sentinel {
					t.Fatalf("err = %v, not a sentinel", err)
				}
				if signed && errors.Is(err, ErrBadSignature) {
					t.Fatalf("correctly signed token rejected: %v", err)
				}
				// Fuzzed tokens may spell words of the error messages, so
				// only the keys and the MAC this test computed are looked for.
				assertNoSecret(t, err.Error(), "", key1, key2)
				if signed {
					if m := token[strings.LastIndexByte(token, '.')+1:]; strings.Contains(err.Error(), m) {
						t.Fatalf("error %q contains the MAC", err)
					}
				}
				return
			}
			if c.Tenant == "" || c.Env == "" || c.ConversationID == "" {
				t.Fatalf("accepted claims with an empty field: %+v", c)
			}
			if now.Unix() >= c.ExpiresAt {
				t.Fatalf("accepted expired claims: %+v", c)
			}
			if c.IssuedAt > now.Add(MaxClockSkew).Unix() {
				t.Fatalf("accepted claims from the future: %+v", c)
			}
			if c.IssuedAt <= 0 || c.ExpiresAt <= c.IssuedAt || c.ExpiresAt-c.IssuedAt > int64((WorkerTokenTTL+workerTokenLifetimeSlack)/time.Second) {
				t.Fatalf("accepted claims with a lifetime MintWorkerToken never writes: %+v", c)
			}
			again, err := kr.VerifyWorkerToken(token, now)
			if err != nil {
				t.Fatalf("accepted token fails to re-verify: %v", err)
			}
			if diff := cmp.Diff(c, again); diff != "" {
				t.Fatalf("re-verified claims differ (-first +second):\n%s", diff)
			}
		}
		check(token, false)
		// Sign the fuzzer's payload so that it reaches the claims checks.
		check(signToken(key1, "k1", base64.RawURLEncoding.EncodeToString(payload)), true)
	})
}
