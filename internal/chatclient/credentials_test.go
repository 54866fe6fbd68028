package chatclient

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCredentialsSaveAndLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config", "talkide", "tokens.json")
	c, err := LoadCredentials(path)
	if err != nil || len(c) != 0 {
		t.Fatalf("a missing file: %v, %v; want no tokens and no error", c, err)
	}
	c.Set("cp.example.com:7878/", "tka_a.secret")
	c.Set("https://other.example.com", "tka_b.secret")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", p, got, want)
		}
	}
	got, err := LoadCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	for url, want := range map[string]string{
		"http://cp.example.com:7878":   "tka_a.secret",
		"cp.example.com:7878":          "tka_a.secret",
		"https://other.example.com//":  "tka_b.secret",
		"http://other.example.com":     "", // another scheme is another server
		"https://unknown.example.com/": "",
	} {
		if tok := got.Token(url); tok != want {
			t.Errorf("Token(%q) = %q, want %q", url, tok, want)
		}
	}
}

func TestLoadCredentialsRefuses(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]string{
		"not JSON":      "tka_a.secret\n",
		"not an object": `["tka_a.secret"]`,
		"too large":     `{"http://x": "` + strings.Repeat("a", maxCredentialsFile) + `"}`,
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadCredentials(path)
			if err == nil || !strings.Contains(err.Error(), "not a tokens file") {
				t.Errorf("LoadCredentials = %v, want a refusal naming it not a tokens file", err)
			}
			if err != nil && strings.Contains(err.Error(), "tka_a.secret") {
				t.Errorf("the error shows the token: %v", err)
			}
		})
	}
	// A directory is no file to read.
	if _, err := LoadCredentials(dir); err == nil {
		t.Error("LoadCredentials(a directory) succeeded")
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7878":               "http://127.0.0.1:7878",
		"http://127.0.0.1:7878/":       "http://127.0.0.1:7878",
		"https://talkide.example.com":  "https://talkide.example.com",
		"https://talkide.example.com/": "https://talkide.example.com",
		"https://h/base//":             "https://h/base",
	} {
		if got := BaseURL(in); got != want {
			t.Errorf("BaseURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadToken(t *testing.T) {
	tests := map[string]struct {
		in, want string
		err      error
	}{
		"a line":           {"tka_a.secret\n", "tka_a.secret", nil},
		"no newline":       {"tka_a.secret", "tka_a.secret", nil},
		"spaces and CRLF":  {"  tka_a.secret \r\nignored\n", "tka_a.secret", nil},
		"only the first":   {"tka_a.secret\ntka_b.secret\n", "tka_a.secret", nil},
		"empty":            {"", "", ErrNoToken},
		"a blank line":     {" \n tka_a.secret\n", "", ErrNoToken},
		"beyond the bound": {strings.Repeat(" ", maxTokenFile) + "tka_a.secret\n", "", ErrNoToken},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ReadToken(strings.NewReader(tc.in))
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Errorf("ReadToken = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// FuzzReadToken: whatever is piped in, a token is one line without
// surrounding space, read within the bound.
func FuzzReadToken(f *testing.F) {
	for _, s := range []string{"tka_a.secret\n", "", "\n", " x \r\n y", strings.Repeat("z", maxTokenFile+10)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r := &countingReader{r: strings.NewReader(in)}
		tok, err := ReadToken(r)
		if r.n > maxTokenFile {
			t.Fatalf("read %d bytes, more than %d", r.n, maxTokenFile)
		}
		if err != nil {
			return
		}
		if tok == "" || tok != strings.TrimSpace(tok) || strings.ContainsRune(tok, '\n') {
			t.Fatalf("ReadToken(%q) = %q", in, tok)
		}
	})
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
