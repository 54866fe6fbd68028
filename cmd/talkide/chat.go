package main

import (
	"errors"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/chatclient"
	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/roles"
)

// chatFlags are talkide chat's flags.
type chatFlags struct {
	addr, dataDir, conv, title, message, recent string
	url, tokenFile, credentials                 string
	verbose, color, history                     bool
	attach                                      []string
}

func newChatCmd(std stdio) *cobra.Command {
	var f chatFlags
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Talk to Mara from the terminal",
		Long: `Talk to a conversation through the control-plane's browser API: type a
message, watch the turn stream (text, tool calls, usage). Without --addr it
finds talkide dev's control-plane from DATA-DIR/dev.json. Type /help inside for
the client's commands.`,
		Example: `  talkide chat                          # a new conversation
  talkide chat --conversation demo      # create or reopen "demo"
  talkide chat -m 'hello'               # one message, print the turn, exit
  talkide chat -m 'why?' --attach build.log   # with a file attached`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runChat(cmd, f, std)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.addr, "addr", "", "control-plane URL or HOST:PORT (default: read from DATA-DIR/dev.json, else http://127.0.0.1:7878)")
	fs.StringVar(&f.url, "url", "", "a shared control-plane's URL (as --addr), with the API token of --token-file or of talkide login")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding an API token (talkide admin api-token issue) sent as Authorization: Bearer")
	fs.StringVar(&f.credentials, "credentials", "", "talkide login's tokens file (default CONFIG-DIR/talkide/tokens.json)")
	fs.StringVar(&f.dataDir, "data-dir", "./.talkide", "talkide dev's data directory, to find the control-plane")
	fs.StringVar(&f.conv, "conversation", "", "conversation id to open (created if missing); empty starts a new one")
	fs.StringVar(&f.title, "title", "", "title of a new conversation")
	fs.StringVarP(&f.message, "message", "m", "", "send this one message, print the turn, and exit (non-zero if the turn failed)")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "also print usage and session events")
	fs.BoolVar(&f.color, "color", false, "use ANSI colours")
	fs.BoolVar(&f.history, "history", false, "replay all of the conversation's earlier events first (--recent all)")
	fs.StringVar(&f.recent, "recent", "", "earlier turns to show on reopening a conversation: a number, all or none (default 3, with -m none)")
	fs.StringArrayVar(&f.attach, "attach", nil, "attach a local file (up to 10 MiB; repeat for more) to the message of -m, or to the first one typed")
	cli.BindEnv(fs, "addr", "data-dir", "color", "verbose", "recent", "url", "token-file", "credentials")
	return cmd
}

// runChat talks to a conversation through the control-plane's browser API.
func runChat(cmd *cobra.Command, f chatFlags, std stdio) error {
	turns := chatclient.DefaultRecent
	if f.message != "" {
		turns = 0
	}
	switch {
	case f.history && f.recent != "" && f.recent != "all":
		return cli.Usagef(cmd, "--history is --recent all; give one of them")
	case f.history:
		turns = chatclient.RecentAll
	case f.recent != "":
		n, err := chatclient.ParseRecent(f.recent)
		if err != nil {
			return cli.Usagef(cmd, "--recent: %v", err)
		}
		turns = n
	}
	if f.url != "" && f.addr != "" && f.url != f.addr {
		return cli.Usagef(cmd, "--url and --addr name the control-plane; give one of them")
	}
	addr := f.addr
	if f.url != "" {
		addr = f.url
	}
	if addr == "" {
		addr = "http://127.0.0.1:7878"
		if info, err := roles.ReadDevInfo(f.dataDir); err == nil && info.ControlPlane != "" {
			addr = info.ControlPlane
		}
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr // HOST:PORT, as talkide dev's --addr takes it
	}
	token, err := chatToken(addr, f.tokenFile, f.credentials)
	if err != nil {
		return err
	}
	err = chatclient.Chat(cmd.Context(), addr, chatclient.ChatOptions{
		Token: token, ConversationID: f.conv, Title: f.title, Message: f.message, Recent: turns, Attach: f.attach,
		In: std.in, Out: std.out, Verbose: f.verbose, Color: f.color, Echoed: isTerminal(std.in), Signals: std.signals,
	})
	if f.message != "" && errors.Is(err, chatclient.ErrTurnFailed) {
		// The renderer has printed the failure where the turn ended; as
		// the command's error it would show twice.
		return &cli.ShownError{Err: err}
	}
	return err
}

// isTerminal reports whether r is a terminal, which echoes what is typed.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
