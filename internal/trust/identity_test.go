package trust

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
)

func TestIdentityTokenRoundTrip(t *testing.T) {
	tok := NewIdentityToken()
	if !strings.HasPrefix(tok.Token, identityPrefix+tok.ID+".") {
		t.Fatalf("token does not start with %q + id + \".\"", identityPrefix)
	}
	if len(tok.Token) > MaxIdentityTokenLen {
		t.Fatalf("token length %d > MaxIdentityTokenLen %d", len(tok.Token), MaxIdentityTokenLen)
	}
	id, hash, err := ParseIdentityToken(tok.Token)
	if err != nil {
		t.Fatalf("ParseIdentityToken(fresh token): %v", err)
	}
	if id != tok.ID {
		t.Errorf("id = %q, want %q", id, tok.ID)
	}
	if !HashesEqual(hash, tok.Hash) {
		t.Error("hash of parsed token differs from the issued hash")
	}
	// The stored hash is of the secret alone, so a leaked hash plus id does
	// not spell the token.
	secret := strings.TrimPrefix(tok.Token, identityPrefix+tok.ID+".")
	if hash != sha256.Sum256([]byte(secret)) {
		t.Error("hash is not SHA-256 of the secret")
	}
}

func TestIdentityTokenWrongSecret(t *testing.T) {
	a, b := NewIdentityToken(), NewIdentityToken()
	// b's secret presented under a's id: it parses, but the hash must not match.
	forged := identityPrefix + a.ID + "." + strings.TrimPrefix(b.Token, identityPrefix+b.ID+".")
	id, hash, err := ParseIdentityToken(forged)
	if err != nil {
		t.Fatalf("ParseIdentityToken(forged): %v", err)
	}
	if id != a.ID {
		t.Errorf("id = %q, want %q", id, a.ID)
	}
	if HashesEqual(hash, a.Hash) {
		t.Error("a foreign secret matched the stored hash")
	}
}

func TestHashesEqual(t *testing.T) {
	a := sha256.Sum256([]byte("a"))
	lastByte := a
	lastByte[31] ^= 1
	firstByte := a
	firstByte[0] ^= 0x80
	tests := map[string]struct {
		x, y [32]byte
		want bool
	}{
		"same":              {a, a, true},
		"zero":              {[32]byte{}, [32]byte{}, true},
		"other":             {a, sha256.Sum256([]byte("b")), false},
		"last byte differs": {a, lastByte, false},
		"first bit differs": {a, firstByte, false},
		"zero vs nonzero":   {[32]byte{}, a, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := HashesEqual(tc.x, tc.y); got != tc.want {
				t.Errorf("HashesEqual = %v, want %v", got, tc.want)
			}
			if got := HashesEqual(tc.y, tc.x); got != tc.want {
				t.Errorf("HashesEqual (swapped) = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseIdentityTokenBoundaries(t *testing.T) {
	secret16 := strings.Repeat("s", 16)
	longest := identityPrefix + "id." + strings.Repeat("s", MaxIdentityTokenLen-len(identityPrefix+"id."))
	if len(longest) != MaxIdentityTokenLen {
		t.Fatalf("test bug: len(longest) = %d", len(longest))
	}
	for name, token := range map[string]string{
		"16-char secret":      identityPrefix + "id." + secret16,
		"MaxIdentityTokenLen": longest,
		"one-char id":         identityPrefix + "x." + secret16,
		"dash and underscore": identityPrefix + "a-_b." + "-_" + secret16,
	} {
		t.Run(name, func(t *testing.T) {
			id, _, err := ParseIdentityToken(token)
			if err != nil {
				t.Fatalf("ParseIdentityToken: %v", err)
			}
			want, _, _ := strings.Cut(strings.TrimPrefix(token, identityPrefix), ".")
			if id != want {
				t.Errorf("id = %q, want %q", id, want)
			}
		})
	}
}

func TestParseIdentityTokenMalformed(t *testing.T) {
	good := NewIdentityToken().Token
	rest := strings.TrimPrefix(good, identityPrefix)
	secret := strings.Repeat("S", 43)
	tests := map[string]string{
		"empty":               "",
		"prefix only":         identityPrefix,
		"no prefix":           rest,
		"upper-case prefix":   "TKI_" + rest,
		"other prefix":        "tkx_" + rest,
		"no dot":              identityPrefix + "abcdef" + secret,
		"empty id":            identityPrefix + "." + secret,
		"empty secret":        identityPrefix + "abcdef.",
		"dot only":            identityPrefix + ".",
		"two dots":            identityPrefix + "abc.def." + secret,
		"too long":            identityPrefix + "abcdef." + strings.Repeat("s", MaxIdentityTokenLen),
		"one over max":        identityPrefix + "id." + strings.Repeat("s", MaxIdentityTokenLen-len(identityPrefix+"id.")+1),
		"short secret":        identityPrefix + "abcdef." + strings.Repeat("s", 15),
		"plus in secret":      identityPrefix + "abcdef." + secret + "+",
		"slash in secret":     identityPrefix + "abcdef." + "ab/" + secret,
		"padding":             good + "=",
		"space in id":         identityPrefix + "ab cd." + secret,
		"slash in id":         identityPrefix + "ab/cd." + secret,
		"leading space":       " " + good,
		"trailing newline":    good + "\n",
		"NUL in secret":       identityPrefix + "abcdef." + secret + "\x00",
		"non-ASCII in secret": identityPrefix + "abcdef." + secret + "é",
		"bearer scheme":       "Bearer " + good,
		"worker token shape":  "wt1.k1." + secret + "." + secret,
	}
	for name, token := range tests {
		t.Run(name, func(t *testing.T) {
			id, hash, err := ParseIdentityToken(token)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if id != "" || hash != ([32]byte{}) {
				t.Errorf("a rejected token returned id %q and a non-zero hash", id)
			}
			if len(token) >= 8 && strings.Contains(err.Error(), token) {
				t.Errorf("error %q contains the token", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q contains the secret", err)
			}
		})
	}
}

func TestNewIdentityTokenUnique(t *testing.T) {
	const n = 1000
	ids := make(map[string]bool, n)
	tokens := make(map[string]bool, n)
	hashes := make(map[[32]byte]bool, n)
	for range n {
		tok := NewIdentityToken()
		if ids[tok.ID] || tokens[tok.Token] || hashes[tok.Hash] {
			t.Fatalf("NewIdentityToken repeated itself after %d tokens", len(ids))
		}
		ids[tok.ID], tokens[tok.Token], hashes[tok.Hash] = true, true, true
	}
}

func FuzzParseIdentityToken(f *testing.F) {
	f.Add(NewIdentityToken().Token)
	f.Add("tki_abc.0123456789abcdef")
	f.Add("tki_abc.0123456789abcde")
	f.Add("tki_.0123456789abcdef")
	f.Add("tki_abc.")
	f.Add("tki_abc.def.0123456789abcdef")
	f.Add("tki_" + strings.Repeat("a", 300))
	f.Add("")
	f.Add("tki_\x00.\xff")
	f.Fuzz(func(t *testing.T, token string) {
		id, hash, err := ParseIdentityToken(token)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if len(token) >= 16 && strings.Contains(err.Error(), token) {
				t.Fatalf("error %q contains the token", err)
			}
			return
		}
		if len(token) > MaxIdentityTokenLen {
			t.Fatalf("accepted a token of %d bytes", len(token))
		}
		if !isB64URL(id) {
			t.Fatalf("accepted id %q is not base64url", id)
		}
		secret, ok := strings.CutPrefix(token, identityPrefix+id+".")
		if !ok {
			t.Fatalf("accepted token %q is not prefix + id %q + \".\" + secret", token, id)
		}
		if !isB64URL(secret) || len(secret) < 16 {
			t.Fatalf("accepted secret %q", secret)
		}
		if hash != sha256.Sum256([]byte(secret)) {
			t.Fatal("hash is not SHA-256 of the secret")
		}
	})
}
