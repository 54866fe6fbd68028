package auth

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/httpapi"
)

// FuzzLoginCookie: whatever a browser sends as the login cookie, open
// never panics and accepts only what seal made with the key.
func FuzzLoginCookie(f *testing.F) {
	l := &oidcLogin{o: OIDCOptions{LoginKey: bytes.Repeat([]byte("k"), 32)}}
	now := time.Unix(1_800_000_000, 0)
	good := l.seal(pending{State: "s", Nonce: "n", Verifier: "v", Return: "/", Expires: now.Unix() + 60})
	f.Add(good)
	f.Add("")
	f.Add(".")
	f.Add("e30.AAAA")
	f.Add(good + "x")
	f.Fuzz(func(t *testing.T, v string) {
		if _, err := l.open(v, now); err != nil {
			return
		}
		// Only the bytes seal signed open (base64 may spell them in more
		// than one way).
		body, _, _ := strings.Cut(v, ".")
		goodBody, _, _ := strings.Cut(good, ".")
		b, _ := base64.RawURLEncoding.DecodeString(body)
		g, _ := base64.RawURLEncoding.DecodeString(goodBody)
		if !bytes.Equal(b, g) {
			t.Fatalf("opened a cookie seal did not make: %q", v)
		}
	})
}

// FuzzReturnPath: a kept return target is a canonical path on this host.
func FuzzReturnPath(f *testing.F) {
	for _, s := range []string{"/", "//evil", "/\\evil", "/a/../b", "/c?x=//y", "https://e", "/%2e%2e/x", "/\t/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := returnPath(s)
		if got == "/" {
			return
		}
		if got != s || got[0] != '/' || strings.HasPrefix(got, "//") || strings.ContainsAny(got, "\\\r\n") ||
			!httpapi.CanonicalPath(strings.SplitN(got, "?", 2)[0]) {
			t.Fatalf("returnPath(%q) = %q", s, got)
		}
	})
}
