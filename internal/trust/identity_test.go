package trust

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// The token's shape is tokenscheme's and tested there; these pin the
// identity family's prefix and a token issued before tokenscheme existed.
func TestIdentityTokenRoundTrip(t *testing.T) {
	tok := NewIdentityToken()
	if !strings.HasPrefix(tok.Token, "tki_"+tok.ID+".") {
		t.Fatalf("token does not start with tki_ + id + \".\"")
	}
	id, hash, err := ParseIdentityToken(tok.Token)
	if err != nil || id != tok.ID || !HashesEqual(hash, tok.Hash) {
		t.Fatalf("ParseIdentityToken(fresh token) = %q, %v", id, err)
	}
}

func TestIdentityTokenIssuedBefore(t *testing.T) {
	const token = "tki_Xy3kP0qRsT1u.Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg"
	stored, _ := hex.DecodeString("eb61961ac2bddb064bcd491f1926db0a25ba4de9d5d4ed450011bba77844787c")
	id, hash, err := ParseIdentityToken(token)
	if err != nil || id != "Xy3kP0qRsT1u" || !HashesEqual(hash, [32]byte(stored)) {
		t.Fatalf("ParseIdentityToken = %q, %v", id, err)
	}
}

func TestIdentityTokenOtherFamilies(t *testing.T) {
	for _, token := range []string{
		"tka_Xy3kP0qRsT1u.Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg",
		"tko_Xy3kP0qRsT1u.Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg",
		"wt1.k1.e30.AAAA",
	} {
		if _, _, err := ParseIdentityToken(token); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseIdentityToken(%.8s…) = %v, want ErrMalformed", token, err)
		}
	}
}
