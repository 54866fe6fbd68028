package trust

import (
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/fakeclock"
)

// A token or signature has exactly one spelling: a variant whose last
// base64 character differs only in bits the decoder would drop is refused.
func TestNonCanonicalBase64Refused(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	variant := func(s string) string {
		i := strings.IndexByte(alphabet, s[len(s)-1])
		return s[:len(s)-1] + string(alphabet[i^1])
	}
	kr, err := NewKeyring("k1", map[string][]byte{"k1": NewKey()})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, _ := kr.MintWorkerToken("acme", "prod", "c1", now)
	if _, err := kr.VerifyWorkerToken(tok, now); err != nil {
		t.Fatal(err)
	}
	if _, err := kr.VerifyWorkerToken(variant(tok), now); err == nil {
		t.Error("a token with a non-canonical MAC encoding verified")
	}

	c := fakeclock.New(t0)
	r := signedRequest(t, acmeSigner(c), "GET", "http://worker/v1/sessions", nil)
	h := r.Header.Get(SignatureHeader)
	if _, err := ParseSignature(h); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseSignature(variant(h)); err == nil {
		t.Error("a signature with a non-canonical MAC encoding parsed")
	}
}
