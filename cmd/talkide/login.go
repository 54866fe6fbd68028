package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/chatclient"
	"github.com/talkide/platform/internal/cli"
)

// talkide login keeps an API token per control-plane URL, for talkide chat
// against a shared control-plane. The file holds secrets: it is written
// 0600 in a 0700 directory, and never printed.

// maxTokenFile bounds a token file read.
const maxTokenFile = 4 << 10

// credentialsPath is where talkide login keeps tokens unless --credentials
// says otherwise: talkide/tokens.json in the user's config directory.
func credentialsPath(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory for the stored tokens (pass --credentials FILE): %w", err)
	}
	return filepath.Join(dir, "talkide", "tokens.json"), nil
}

// credentials maps a control-plane's base URL to its API token.
type credentials map[string]string

func loadCredentials(path string) (credentials, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return credentials{}, nil
	}
	if err != nil {
		return nil, err
	}
	c := credentials{}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: not a tokens file: %w", path, err)
	}
	return c, nil
}

func (c credentials) save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o600)
}

// readToken reads a token from r: its first line, trimmed.
func readToken(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, maxTokenFile)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	tok := strings.TrimSpace(line)
	if tok == "" {
		return "", errors.New("no token given")
	}
	return tok, nil
}

func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	tok, err := readToken(f)
	if err != nil {
		return "", fmt.Errorf("--token-file %s: %w", path, err)
	}
	return tok, nil
}

// normalizeURL is the key a URL's token is stored under.
func normalizeURL(u string) string {
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return strings.TrimRight(u, "/")
}

func newLoginCmd(std stdio) *cobra.Command {
	var u, tokenFile, creds string
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Store an API token for a control-plane URL, for talkide chat",
		Long: `Store an API token (talkide admin api-token issue) for the control-plane at
--url, after checking that it opens the browser API. The token is read from
--token-file, else from the first line of standard input; it is kept in
--credentials (default CONFIG-DIR/talkide/tokens.json, mode 0600), where
talkide chat --url finds it.`,
		Example: `  talkide login --url https://talkide.example.com < token.txt
  talkide chat --url https://talkide.example.com`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if u == "" {
				return cli.Usagef(cmd, "--url is required")
			}
			var (
				tok string
				err error
			)
			if tokenFile != "" {
				tok, err = readTokenFile(tokenFile)
			} else {
				tok, err = readToken(std.in)
			}
			if err != nil {
				return err
			}
			base := normalizeURL(u)
			client, err := chatclient.New(base, &chatclient.Options{Token: tok})
			if err != nil {
				return err
			}
			if _, err := client.ListConversations(cmd.Context()); err != nil {
				return fmt.Errorf("the token does not open %s: %w", base, err)
			}
			path, err := credentialsPath(creds)
			if err != nil {
				return err
			}
			c, err := loadCredentials(path)
			if err != nil {
				return err
			}
			c[base] = tok
			if err := c.save(path); err != nil {
				return err
			}
			fmt.Fprintf(std.out, "logged in to %s; the token is in %s\n", base, path)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&u, "url", "", "the control-plane's URL (required)")
	fs.StringVar(&tokenFile, "token-file", "", "file holding the API token (default: standard input)")
	fs.StringVar(&creds, "credentials", "", "file the tokens are kept in (default CONFIG-DIR/talkide/tokens.json)")
	cli.BindEnv(fs, "url", "credentials")
	return cmd
}

// chatToken is the token talkide chat sends to base: --token-file's, else
// the one talkide login stored for base, else none.
func chatToken(base, tokenFile, creds string) (string, error) {
	if tokenFile != "" {
		return readTokenFile(tokenFile)
	}
	path, err := credentialsPath(creds)
	if err != nil {
		return "", nil // nowhere to look: no stored token
	}
	c, err := loadCredentials(path)
	if err != nil {
		return "", err
	}
	return c[normalizeURL(base)], nil
}
