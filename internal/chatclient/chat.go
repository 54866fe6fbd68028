package chatclient

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
)

// ChatOptions are what talkide chat opens and how it shows it.
type ChatOptions struct {
	// Token is the API token sent to the control-plane; "" sends none.
	Token string
	// ConversationID names the conversation to open, created if missing;
	// "" starts a new one titled Title.
	ConversationID, Title string
	// Message, when set, is sent alone: its turn is rendered and Chat
	// returns, an error wrapping ErrTurnFailed if the turn failed.
	Message string
	// Attach are local files stored in the conversation's workspace once
	// it is open, which Message (or, without it, the first line sent)
	// names; one that cannot be stored ends Chat before anything is sent.
	Attach []string
	// Recent is how many earlier turns of a reopened conversation are
	// shown first (Session.Recent).
	Recent int
	In     io.Reader
	Out    io.Writer
	// Verbose also renders usage and session events; Color uses ANSI
	// colours; Echoed says In is a terminal that shows what is typed
	// (Session.Echoed).
	Verbose, Color, Echoed bool
	// Signals are the process's. Ctrl-C belongs to the session: the first
	// os.Interrupt interrupts the running turn, the next one leaves.
	// SIGTERM ends the chat. Nil: signals are not the chat's business.
	Signals <-chan os.Signal
}

// Chat opens a conversation of the control-plane at baseURL and talks to
// it: the lines of o.In until it ends or the user leaves, or o.Message
// alone.
func Chat(ctx context.Context, baseURL string, o ChatOptions) error {
	client, err := New(baseURL, &Options{Token: o.Token})
	if err != nil {
		return err
	}
	return chatWith(ctx, client, o)
}

// chatWith is Chat through client.
func chatWith(ctx context.Context, client *Client, o ChatOptions) error {
	ctx, interrupts, stop := splitSignals(ctx, o.Signals)
	defer stop()
	c, err := client.CreateConversation(ctx, o.ConversationID, o.Title)
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
	r := &Renderer{W: o.Out, Verbose: o.Verbose, Color: o.Color, ShowUser: true}
	s := &Session{Client: client, ConversationID: c.ID, Renderer: r, After: after, Recent: o.Recent,
		Interrupts: interrupts, Echoed: o.Message == "" && o.Echoed}
	var attached attachments
	for _, path := range o.Attach {
		if attached, _, err = s.attachFile(ctx, attached, path); err != nil {
			return err
		}
	}
	if o.Message != "" {
		return s.Once(ctx, o.Message, attached...)
	}
	s.Attached = attached
	fmt.Fprintf(o.Out, "conversation %s (type /help for commands)\n", c.ID)
	return s.Run(ctx, o.In)
}

// splitSignals returns a context that ends with parent or at SIGTERM, and
// the other signals for the session's Interrupts. stop ends the context
// and waits for the goroutine that sorts them.
func splitSignals(parent context.Context, sigs <-chan os.Signal) (_ context.Context, interrupts <-chan os.Signal, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	ints := make(chan os.Signal, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGTERM {
					cancel()
					return
				}
				select {
				case ints <- s:
				default: // one is still waiting to be handled
				}
			case <-ctx.Done():
				return
			}
		}
	})
	return ctx, ints, func() { cancel(); wg.Wait() }
}
