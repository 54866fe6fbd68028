package chatclient

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/talkide/platform/internal/atomicfile"
)

// talkide login keeps an API token per control-plane URL, for talkide chat
// against a shared control-plane. The file holds secrets: it is written
// 0600 in a 0700 directory, and never printed.

// maxTokenFile bounds a token read: a token is one short line, and a file
// named by mistake must not be read whole into memory.
const maxTokenFile = 4 << 10

// maxCredentialsFile bounds a credentials file read, for the same reason.
const maxCredentialsFile = 1 << 20

// ErrNoToken is a token source that holds no token.
var ErrNoToken = errors.New("no token given")

// DefaultCredentialsPath is where talkide login keeps tokens unless told
// otherwise: talkide/tokens.json in the user's config directory.
func DefaultCredentialsPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "talkide", "tokens.json"), nil
}

// Credentials maps a control-plane's base URL (BaseURL) to its API token.
type Credentials map[string]string

// LoadCredentials reads the tokens file at path; a missing file holds no
// tokens.
func LoadCredentials(path string) (Credentials, error) {
	b, err := atomicfile.ReadFile(path, maxCredentialsFile)
	if errors.Is(err, os.ErrNotExist) {
		return Credentials{}, nil
	}
	if errors.Is(err, atomicfile.ErrTooLarge) {
		return nil, fmt.Errorf("%s: not a tokens file: larger than %d bytes", path, maxCredentialsFile)
	}
	if err != nil {
		return nil, err
	}
	c := Credentials{}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: not a tokens file: %w", path, err)
	}
	return c, nil
}

// Save writes c to path whole, 0600, creating its directory 0700.
func (c Credentials) Save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}

// Token is the token stored for the control-plane at url, or "".
func (c Credentials) Token(url string) string { return c[BaseURL(url)] }

// Set stores token for the control-plane at url.
func (c Credentials) Set(url, token string) { c[BaseURL(url)] = token }

// BaseURL is the key a URL's token is stored under: with a scheme (http
// when none is given) and without a trailing slash.
func BaseURL(u string) string {
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return strings.TrimRight(u, "/")
}

// ReadToken reads a token from r: its first line, trimmed.
func ReadToken(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, maxTokenFile)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	tok := strings.TrimSpace(line)
	if tok == "" {
		return "", ErrNoToken
	}
	return tok, nil
}
