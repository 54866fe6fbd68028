package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/chatclient"
)

// chatFlags are talkide chat's flags.
type chatFlags struct {
	addr, dataDir, conv, title, message string
	verbose, color, history             bool
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
  talkide chat -m 'hello'               # one message, print the turn, exit`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, _, stop := untilSignal(cmd.Context(), std.signals)
			defer stop()
			return runChat(ctx, f, std)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.addr, "addr", "", "control-plane URL or HOST:PORT (default: read from DATA-DIR/dev.json, else http://127.0.0.1:7878)")
	fs.StringVar(&f.dataDir, "data-dir", "./.talkide", "talkide dev's data directory, to find the control-plane")
	fs.StringVar(&f.conv, "conversation", "", "conversation id to open (created if missing); empty starts a new one")
	fs.StringVar(&f.title, "title", "", "title of a new conversation")
	fs.StringVarP(&f.message, "message", "m", "", "send this one message, print the turn, and exit (non-zero if the turn failed)")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "also print usage and session events")
	fs.BoolVar(&f.color, "color", false, "use ANSI colours")
	fs.BoolVar(&f.history, "history", false, "replay the conversation's earlier events first")
	bindEnv(fs, "addr", "data-dir", "color", "verbose")
	return cmd
}

// runChat talks to a conversation through the control-plane's browser API.
func runChat(ctx context.Context, f chatFlags, std stdio) error {
	addr := f.addr
	if addr == "" {
		addr = "http://127.0.0.1:7878"
		if b, err := os.ReadFile(filepath.Join(f.dataDir, "dev.json")); err == nil {
			var info devInfo
			if json.Unmarshal(b, &info) == nil && info.ControlPlane != "" {
				addr = info.ControlPlane
			}
		}
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr // HOST:PORT, as talkide dev's --addr takes it
	}
	client, err := chatclient.New(addr, nil)
	if err != nil {
		return err
	}
	c, err := client.CreateConversation(ctx, f.conv, f.title)
	if err != nil {
		return err
	}
	if c.State == nil {
		if c, err = client.GetConversation(ctx, c.ID); err != nil {
			return err
		}
	}
	var after int64
	if !f.history && c.State != nil {
		after = c.State.LastSeq
	}
	r := &chatclient.Renderer{W: std.out, Verbose: f.verbose, Color: f.color, ShowUser: f.history}
	s := &chatclient.Session{Client: client, ConversationID: c.ID, Renderer: r, After: after}
	if f.message != "" {
		return s.Once(ctx, f.message)
	}
	fmt.Fprintf(std.out, "conversation %s (type /help for commands)\n", c.ID)
	return s.Run(ctx, std.in)
}
