package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/talkide/platform/internal/chatclient"
)

// runChat talks to a conversation through the control-plane's browser API.
func runChat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		addr, dataDir, conv, title, message, recent string
		verbose, color, history                     bool
	)
	fs.StringVar(&addr, "addr", "", "control-plane URL (default: read from DATA-DIR/dev.json, else http://127.0.0.1:7878)")
	fs.StringVar(&dataDir, "data-dir", "./.talkide", "talkide dev's data directory, to find the control-plane")
	fs.StringVar(&conv, "conversation", "", "conversation id to open (created if missing); empty starts a new one")
	fs.StringVar(&title, "title", "", "title of a new conversation")
	fs.StringVar(&message, "m", "", "send this one message, print the turn, and exit (non-zero if the turn failed)")
	fs.BoolVar(&verbose, "v", false, "also print usage and session events")
	fs.BoolVar(&color, "color", false, "use ANSI colours")
	fs.BoolVar(&history, "history", false, "replay all of the conversation's earlier events first (--recent all)")
	fs.StringVar(&recent, "recent", "", "earlier turns to show on reopening a conversation: a number, all or none (default 3, with -m none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	turns := chatclient.DefaultRecent
	if message != "" {
		turns = 0
	}
	switch {
	case history && recent != "" && recent != "all":
		return fmt.Errorf("--history is --recent all; give one of them")
	case history:
		turns = chatclient.RecentAll
	case recent != "":
		n, err := chatclient.ParseRecent(recent)
		if err != nil {
			return fmt.Errorf("--recent: %w", err)
		}
		turns = n
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
	if !c.Created && c.State != nil {
		// Creating the session already logged events (a notice that the
		// model is simulated, say): a new conversation shows them all.
		after = c.State.LastSeq
	}
	// Ctrl-C belongs to the session: the first one interrupts the running
	// turn, the next one leaves. main's NotifyContext would cancel ctx on
	// the first and leave the turn running, so SIGINT is taken from it:
	// signal.Reset undoes every earlier Notify of SIGINT (that context's
	// too) and from here on only this channel hears it. SIGTERM still
	// cancels ctx.
	interrupts := make(chan os.Signal, 1)
	signal.Reset(os.Interrupt)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)
	r := &chatclient.Renderer{W: stdout, Verbose: verbose, Color: color, ShowUser: true}
	s := &chatclient.Session{Client: client, ConversationID: c.ID, Renderer: r, After: after, Recent: turns,
		Interrupts: interrupts, Echoed: message == "" && isTerminal(stdin)}
	if message != "" {
		return s.Once(ctx, message)
	}
	fmt.Fprintf(stdout, "conversation %s (type /help for commands)\n", c.ID)
	return s.Run(ctx, stdin)
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
