package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/chatclient"
	"github.com/talkide/platform/internal/cli"
)

// credentialsPath is the tokens file --credentials names, else talkide
// login's default.
func credentialsPath(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	path, err := chatclient.DefaultCredentialsPath()
	if err != nil {
		return "", fmt.Errorf("no config directory for the stored tokens (pass --credentials FILE): %w", err)
	}
	return path, nil
}

func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	tok, err := chatclient.ReadToken(f)
	if err != nil {
		return "", fmt.Errorf("--token-file %s: %w", path, err)
	}
	return tok, nil
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
				tok, err = chatclient.ReadToken(std.in)
			}
			if err != nil {
				return err
			}
			base := chatclient.BaseURL(u)
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
			c, err := chatclient.LoadCredentials(path)
			if err != nil {
				return err
			}
			c.Set(base, tok)
			if err := c.Save(path); err != nil {
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
	c, err := chatclient.LoadCredentials(path)
	if err != nil {
		return "", err
	}
	return c.Token(base), nil
}
