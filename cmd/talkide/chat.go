package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/talkide/platform/internal/chatclient"
)

// runChat talks to a conversation through the control-plane's browser API.
func runChat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		addr, dataDir, conv, title, message string
		verbose, color, history             bool
	)
	fs.StringVar(&addr, "addr", "", "control-plane URL (default: read from DATA-DIR/dev.json, else http://127.0.0.1:7878)")
	fs.StringVar(&dataDir, "data-dir", "./.talkide", "talkide dev's data directory, to find the control-plane")
	fs.StringVar(&conv, "conversation", "", "conversation id to open (created if missing); empty starts a new one")
	fs.StringVar(&title, "title", "", "title of a new conversation")
	fs.StringVar(&message, "m", "", "send this one message, print the turn, and exit (non-zero if the turn failed)")
	fs.BoolVar(&verbose, "v", false, "also print usage and session events")
	fs.BoolVar(&color, "color", false, "use ANSI colours")
	fs.BoolVar(&history, "history", false, "replay the conversation's earlier events first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if addr == "" {
		addr = "http://127.0.0.1:7878"
		if b, err := os.ReadFile(filepath.Join(dataDir, "dev.json")); err == nil {
			var info devInfo
			if json.Unmarshal(b, &info) == nil && info.ControlPlane != "" {
				addr = info.ControlPlane
			}
		}
	}
	client, err := chatclient.New(addr, nil)
	if err != nil {
		return err
	}
	c, err := client.CreateConversation(ctx, conv, title)
	if err != nil {
		return err
	}
	if c.State == nil {
		if c, err = client.GetConversation(ctx, c.ID); err != nil {
			return err
		}
	}
	var after int64
	if !history && c.State != nil {
		after = c.State.LastSeq
	}
	r := &chatclient.Renderer{W: stdout, Verbose: verbose, Color: color, ShowUser: history}
	s := &chatclient.Session{Client: client, ConversationID: c.ID, Renderer: r, After: after}
	if message != "" {
		return s.Once(ctx, message)
	}
	fmt.Fprintf(stdout, "conversation %s (type /help for commands)\n", c.ID)
	return s.Run(ctx, stdin)
}
