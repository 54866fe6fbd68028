package contract

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateWorkspacePath(t *testing.T) {
	for in, want := range map[string]string{
		"": ".", ".": ".", "main.go": "main.go", "src/": "src", ".git/config": ".git/config",
		"a b/%2e%2e": "a b/%2e%2e", "…/ü.txt": "…/ü.txt", "..x/y..": "..x/y..",
	} {
		got, err := ValidateWorkspacePath("path", in)
		if err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"..", "../x", "a/../b", "a/..", "./a", "a/./b", "/etc/passwd", "/", "a//b", "//", `a\b`, `..\x`,
		"a\x00b", "a\nb", "a\x7fb", "\xff", strings.Repeat("a", MaxWorkspacePath+1),
	} {
		if got, err := ValidateWorkspacePath("path", in); err == nil || !errors.Is(err, ErrInvalidPath) {
			t.Errorf("%q: %q, %v; want an ErrInvalidPath", in, got, err)
		}
	}
}

func TestValidateToolOutputName(t *testing.T) {
	for _, ok := range []string{"toolu_01ABC.txt", "a.txt", "x-y_z.txt"} {
		if err := ValidateToolOutputName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".txt", "a", "a.TXT", "../a.txt", "a/b.txt", "a.b.txt", "a .txt", strings.Repeat("a", 201) + ".txt", "a.txt\x00"} {
		if err := ValidateToolOutputName(bad); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("%q: %v, want an ErrInvalidPath", bad, err)
		}
	}
}

// FuzzValidateWorkspacePath checks that whatever passes is relative, clean
// of "." and ".." components, free of control characters and bounded.
func FuzzValidateWorkspacePath(f *testing.F) {
	for _, s := range []string{"a/b", "..", "%2e%2e/x", "/abs", "a\\b", "a//b", "src/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ValidateWorkspacePath("path", in)
		if err != nil {
			return
		}
		if p == "." {
			return
		}
		if strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.ContainsAny(p, "\\\x00") || len(p) > MaxWorkspacePath {
			t.Fatalf("%q passed as %q", in, p)
		}
		for _, el := range strings.Split(p, "/") {
			if el == "" || el == "." || el == ".." {
				t.Fatalf("%q passed as %q with component %q", in, p, el)
			}
		}
	})
}

func TestParseViewQuery(t *testing.T) {
	if q, err := ParseViewQuery("path=a%2Fb&download=1", "path", "download"); err != nil || q.Get("path") != "a/b" {
		t.Errorf("%v %v", q, err)
	}
	for _, raw := range []string{"path=a&path=b", "other=1", "path=%zz", "path=a;b", strings.Repeat("a", MaxViewQuery+1)} {
		if _, err := ParseViewQuery(raw, "path", "download"); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("%.40q: %v, want an ErrInvalidPath", raw, err)
		}
	}
}
