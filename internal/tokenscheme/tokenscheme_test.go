package tokenscheme

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

var testScheme = New("tkt_", "test token")

func TestIssueParseRoundTrip(t *testing.T) {
	tok := testScheme.Issue()
	if !strings.HasPrefix(tok.Token, "tkt_"+tok.ID+".") {
		t.Fatalf("token does not start with the prefix, the id and a dot")
	}
	if len(tok.Token) > MaxLen || !ValidID(tok.ID) {
		t.Fatalf("issued token of %d bytes, id valid %v", len(tok.Token), ValidID(tok.ID))
	}
	p, err := testScheme.Parse(tok.Token)
	if err != nil {
		t.Fatalf("Parse(fresh token): %v", err)
	}
	if p.ID != tok.ID || !p.Matches(tok.Hash) {
		t.Errorf("parsed id %q (want %q), hash matches %v", p.ID, tok.ID, p.Matches(tok.Hash))
	}
	// The stored hash is of the secret alone, so a leaked hash plus id does
	// not spell the token.
	secret := strings.TrimPrefix(tok.Token, "tkt_"+tok.ID+".")
	if tok.Hash != sha256.Sum256([]byte(secret)) || len(secret) != 43 {
		t.Error("the hash is not the SHA-256 of a 256-bit secret")
	}
}

// TestFixedToken pins the format: a token written out by hand, with the
// SHA-256 of its secret computed outside Go, as a store holds it.
func TestFixedToken(t *testing.T) {
	const token = "tkt_AbCdEfGhIjKl.q8sY3v0mX1cJ7kR2pL9wT4nB6hD5fG0aZ-_eU1iO2yQ"
	stored := mustHash(t, "92ae3fdcd74512c67b9028bfb9088959e0af4b8f1cf9ef97280b966c1d1ccde5")
	p, err := testScheme.Parse(token)
	if err != nil || p.ID != "AbCdEfGhIjKl" || !p.Matches(stored) {
		t.Fatalf("Parse = %+v, %v", p, err)
	}
}

func TestWrongSecret(t *testing.T) {
	a, b := testScheme.Issue(), testScheme.Issue()
	forged := "tkt_" + a.ID + "." + strings.TrimPrefix(b.Token, "tkt_"+b.ID+".")
	p, err := testScheme.Parse(forged)
	if err != nil || p.ID != a.ID {
		t.Fatalf("Parse(forged) = %q, %v", p.ID, err)
	}
	if p.Matches(a.Hash) {
		t.Error("a foreign secret matched the stored hash")
	}
}

func TestHashesEqual(t *testing.T) {
	a := sha256.Sum256([]byte("a"))
	lastByte, firstByte := a, a
	lastByte[31] ^= 1
	firstByte[0] ^= 0x80
	tests := map[string]struct {
		x, y [32]byte
		want bool
	}{
		"equal":           {a, a, true},
		"both zero":       {[32]byte{}, [32]byte{}, true},
		"last byte":       {a, lastByte, false},
		"first byte":      {a, firstByte, false},
		"zero and filled": {[32]byte{}, a, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if HashesEqual(tc.x, tc.y) != tc.want || HashesEqual(tc.y, tc.x) != tc.want {
				t.Errorf("HashesEqual = %v, want %v", !tc.want, tc.want)
			}
		})
	}
}

func TestParseBoundaries(t *testing.T) {
	secret16 := "0123456789abcdef"
	longest := "tkt_id." + strings.Repeat("s", MaxLen-len("tkt_id."))
	for name, token := range map[string]string{
		"16-char secret":      "tkt_id." + secret16,
		"MaxLen":              longest,
		"one-char id":         "tkt_x." + secret16,
		"MaxIDLen id":         "tkt_" + strings.Repeat("i", MaxIDLen) + "." + secret16,
		"dash and underscore": "tkt_a-_b." + "-_" + secret16,
	} {
		t.Run(name, func(t *testing.T) {
			p, err := testScheme.Parse(token)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if want, _, _ := strings.Cut(strings.TrimPrefix(token, "tkt_"), "."); p.ID != want {
				t.Errorf("id = %q, want %q", p.ID, want)
			}
		})
	}
}

func TestParseMalformed(t *testing.T) {
	secret := strings.TrimPrefix(testScheme.Issue().Token, "tkt_")
	_, secret, _ = strings.Cut(secret, ".")
	for name, token := range map[string]string{
		"empty":               "",
		"prefix only":         "tkt_",
		"another family":      "tki_abcdef." + secret,
		"upper-case prefix":   "TKT_abcdef." + secret,
		"no dot":              "tkt_abcdef" + secret,
		"empty id":            "tkt_." + secret,
		"empty secret":        "tkt_abcdef.",
		"two dots":            "tkt_abc.def." + secret,
		"one over MaxLen":     "tkt_id." + strings.Repeat("s", MaxLen-len("tkt_id.")+1),
		"id over MaxIDLen":    "tkt_" + strings.Repeat("i", MaxIDLen+1) + "." + secret,
		"short secret":        "tkt_abcdef." + strings.Repeat("s", 15),
		"plus in secret":      "tkt_abcdef." + secret + "+",
		"slash in id":         "tkt_ab/cd." + secret,
		"space in id":         "tkt_ab cd." + secret,
		"padding":             "tkt_abcdef." + secret + "=",
		"NUL in secret":       "tkt_abcdef." + secret + "\x00",
		"non-ASCII in secret": "tkt_abcdef." + secret + "é",
		"leading space":       " tkt_abcdef." + secret,
		"trailing newline":    "tkt_abcdef." + secret + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			p, err := testScheme.Parse(token)
			if err == nil {
				t.Fatalf("Parse accepted it as id %q", p.ID)
			}
			if !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrMalformed and ErrInvalid", err)
			}
			if p != (Presented{}) {
				t.Errorf("a refused token gave %+v", p)
			}
			if err.Error() != "test token: malformed credential" {
				t.Errorf("err = %q, want the fixed message", err)
			}
		})
	}
}

func TestIssueUnique(t *testing.T) {
	ids, tokens, hashes := map[string]bool{}, map[string]bool{}, map[[32]byte]bool{}
	for range 1000 {
		tok := testScheme.Issue()
		if ids[tok.ID] || tokens[tok.Token] || hashes[tok.Hash] {
			t.Fatalf("Issue repeated itself after %d tokens", len(ids))
		}
		ids[tok.ID], tokens[tok.Token], hashes[tok.Hash] = true, true, true
	}
}

func TestNewRefusesBadPrefixes(t *testing.T) {
	for _, prefix := range []string{"", "_", "tka", "tk.a_", "Tka_", "tk1_", "tk_a_"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%q) did not panic", prefix)
				}
			}()
			New(prefix, "x")
		}()
	}
}

type record struct{ name string }

func TestVerify(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	good := testScheme.Issue()
	stored := map[string]Stored{}
	add := func(st Stored) string {
		tok := testScheme.Issue()
		st.Hash = tok.Hash
		stored[tok.ID] = st
		return tok.Token
	}
	stored[good.ID] = Stored{Hash: good.Hash}
	revoked := add(Stored{RevokedAt: t0})
	revokedLater := add(Stored{RevokedAt: t0.Add(time.Second)})
	expired := add(Stored{ExpiresAt: t0})
	expiresLater := add(Stored{ExpiresAt: t0.Add(time.Second)})
	unknown := testScheme.Issue().Token
	wrong := "tkt_" + good.ID + "." + strings.Repeat("A", 43)
	storeDown := errors.New("store down")
	lookup := func(id string) (record, Stored, bool, error) {
		if id == "down" {
			return record{}, Stored{}, false, storeDown
		}
		st, ok := stored[id]
		return record{name: id}, st, ok, nil
	}
	for name, tc := range map[string]struct {
		token string
		want  error // nil: accepted
	}{
		"good":           {good.Token, nil},
		"revoked later":  {revokedLater, nil},
		"expires later":  {expiresLater, nil},
		"revoked at now": {revoked, ErrRevoked},
		"expired at now": {expired, ErrExpired},
		"unknown id":     {unknown, ErrUnknown},
		"wrong secret":   {wrong, ErrWrongSecret},
		"malformed":      {"tkt_nope", ErrMalformed},
		"lookup fails":   {"tkt_down.0123456789abcdef", storeDown},
		"another family": {"tki_" + strings.TrimPrefix(good.Token, "tkt_"), ErrMalformed},
		"bare id":        {good.ID, ErrMalformed},
	} {
		t.Run(name, func(t *testing.T) {
			rec, err := Verify(testScheme, tc.token, t0, lookup)
			if tc.want == nil {
				if err != nil || rec.name == "" {
					t.Fatalf("Verify = %+v, %v", rec, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || rec != (record{}) {
				t.Fatalf("Verify = %+v, %v; want %v", rec, err, tc.want)
			}
			if tc.want != storeDown && !errors.Is(err, ErrInvalid) {
				t.Errorf("a token's fault does not wrap ErrInvalid: %v", err)
			}
			if tc.want == storeDown && errors.Is(err, ErrInvalid) {
				t.Errorf("a lookup's failure is taken for the token's: %v", err)
			}
			if _, secret, ok := strings.Cut(tc.token, "."); ok && strings.Contains(err.Error(), secret) {
				t.Errorf("error %q holds the secret", err)
			}
		})
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"AbCdEfGhIjKl":                  true,
		"-_":                            true,
		strings.Repeat("a", MaxIDLen):   true,
		strings.Repeat("a", MaxIDLen+1): false,
		"":                              false,
		"tka_abc.def":                   false,
		"ab cd":                         false,
		"ab/cd":                         false,
	} {
		if ValidID(id) != want {
			t.Errorf("ValidID(%q) = %v", id, !want)
		}
	}
}

// FuzzParse: whatever is presented, Parse accepts only the scheme's prefix,
// a valid id, a dot and a long enough base64url secret, hashes exactly that
// secret, and never echoes the input in an error.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		testScheme.Issue().Token,
		"tkt_abc.0123456789abcdef",
		"tkt_abc.0123456789abcde",
		"tkt_.0123456789abcdef",
		"tkt_abc.",
		"tkt_abc.def.0123456789abcdef",
		"tkt_" + strings.Repeat("a", 300),
		"tki_abc.0123456789abcdef",
		"",
		"tkt_\x00.\xff",
		"tkt_abc.0123456789abcdef\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		p, err := testScheme.Parse(token)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			// Shorter inputs may be spelt by the fixed message itself.
			if len(token) >= minSecretLen && strings.Contains(err.Error(), token) {
				t.Fatalf("error %q holds the token", err)
			}
			return
		}
		if len(token) > MaxLen || !ValidID(p.ID) {
			t.Fatalf("accepted %d bytes with id %q", len(token), p.ID)
		}
		secret, ok := strings.CutPrefix(token, "tkt_"+p.ID+".")
		if !ok || !IsBase64URL(secret) || len(secret) < minSecretLen {
			t.Fatalf("accepted %q as id %q", token, p.ID)
		}
		if p.Hash != sha256.Sum256([]byte(secret)) {
			t.Fatal("the hash is not the SHA-256 of the secret")
		}
	})
}

func mustHash(t *testing.T, h string) [32]byte {
	t.Helper()
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 32 {
		t.Fatalf("bad fixture hash %q", h)
	}
	return [32]byte(b)
}
