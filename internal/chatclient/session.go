package chatclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/talkide/platform/internal/contract"
)

// Session is a terminal chat on one conversation: its events stream to
// Renderer while messages are sent.
type Session struct {
	Client         *Client
	ConversationID string
	Renderer       *Renderer // nil renders nothing
	// After is the seq after which events are rendered: 0 replays the whole
	// conversation, its SessionState.LastSeq shows only what comes next.
	After int64
}

const helpText = `commands:
/interrupt  stop the running turn
/quit       leave (so does end of input)
/help       this text
any other line is sent as a message; lines typed while a turn runs are sent after it ends`

// Run is the interactive loop: it renders the conversation's events from
// After while it reads lines from in. A non-empty line is sent as a message;
// lines arriving while the previously sent message's turn runs wait for it
// to end and are then sent in order. "/interrupt" stops the running turn,
// "/help" lists the commands, and "/quit" ends Run at once. At the end of
// in, Run first waits for the turns of the lines sent or waiting.
//
// Run returns nil when ctx ends, on "/quit" and at the end of input; the
// stream's error if it fails for good (an unknown conversation, say); and
// the error reading in. A failed send is reported through the renderer and
// does not end Run.
//
// Reading in cannot be interrupted: if Run returns while a read of in is
// blocked, the goroutine reading stays blocked until that read returns.
func (s *Session) Run(ctx context.Context, in io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	f := s.follow(ctx)
	defer func() { cancel(); <-f.done }()
	lines := readLines(ctx, in)

	var (
		queue []string // lines not sent yet, oldest first
		// busy is true while a turn runs that must end before the next
		// send: the turn waitTurn this session started, or, when waitTurn
		// is "", a turn someone else started (Send said turn_running).
		busy     bool
		waitTurn string
		eof      bool
	)
	for {
		for !busy && len(queue) > 0 {
			text := queue[0]
			queue = queue[1:]
			resp, err := s.Client.Send(ctx, s.ConversationID, text)
			switch {
			case err == nil:
				busy, waitTurn = true, resp.TurnID
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, ErrTurnRunning):
				queue = append([]string{text}, queue...)
				busy, waitTurn = true, ""
			default:
				s.notice("send failed: " + err.Error())
			}
		}
		if eof && !busy {
			return nil
		}
		input := lines
		if eof {
			input = nil // no more lines; wait for the turn
		}
		select {
		case <-ctx.Done():
			return nil
		case <-f.done:
			return f.result(ctx)
		case ev := <-f.terminal:
			if busy && (waitTurn == "" || ev.TurnID == waitTurn) {
				busy, waitTurn = false, ""
			}
		case l, ok := <-input:
			if !ok {
				eof = true
				continue
			}
			if l.err != nil {
				return fmt.Errorf("chatclient: reading input: %w", l.err)
			}
			text := strings.TrimSpace(l.text)
			switch text {
			case "":
			case "/quit", "/exit":
				return nil
			case "/help":
				s.notice(helpText)
			case "/interrupt":
				resp, err := s.Client.Interrupt(ctx, s.ConversationID)
				switch {
				case ctx.Err() != nil:
					return nil
				case err != nil:
					s.notice("interrupt failed: " + err.Error())
				case !resp.Interrupted:
					s.notice("no turn is running")
				}
			default:
				queue = append(queue, text)
			}
		}
	}
}

// Once sends text, renders events from After until the turn it started
// ends, and returns: nil when the turn finished, an error wrapping
// ErrTurnFailed when it failed, ctx's error when ctx ended first.
func (s *Session) Once(ctx context.Context, text string) error {
	ctx, cancel := context.WithCancel(ctx)
	f := s.follow(ctx)
	defer func() { cancel(); <-f.done }()

	resp, err := s.Client.Send(ctx, s.ConversationID, text)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.done:
			if err := f.result(ctx); err != nil {
				return err
			}
			return ctx.Err()
		case ev := <-f.terminal:
			if ev.TurnID != resp.TurnID {
				continue
			}
			if ev.Kind == contract.KindTurnFailed {
				if fl := ev.Failure; fl != nil {
					return fmt.Errorf("chatclient: turn %s: %w (%s): %s", ev.TurnID, ErrTurnFailed, fl.Code, fl.Message)
				}
				return fmt.Errorf("chatclient: turn %s: %w", ev.TurnID, ErrTurnFailed)
			}
			return nil
		}
	}
}

// follower is a goroutine streaming a conversation into the renderer.
type follower struct {
	// terminal receives the turn.finished and turn.failed events, in order,
	// after they were rendered. The stream waits while it is full.
	terminal chan contract.Event
	done     chan struct{} // closed when the stream has returned
	err      error         // what Stream returned; read only after done
}

// follow starts streaming; the stream stops when ctx ends, and the caller
// waits for done before it returns.
func (s *Session) follow(ctx context.Context) *follower {
	f := &follower{terminal: make(chan contract.Event, 16), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.err = s.Client.Stream(ctx, s.ConversationID, s.After, func(ev contract.Event) error {
			if s.Renderer != nil {
				s.Renderer.Render(ev)
			}
			if !contract.Terminal(ev.Kind) {
				return nil
			}
			select {
			case f.terminal <- ev:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	return f
}

// result is what ending the stream means for the session, once done.
func (f *follower) result(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	if f.err != nil {
		return f.err
	}
	return errors.New("chatclient: event stream ended")
}

func (s *Session) notice(text string) {
	if s.Renderer != nil {
		s.Renderer.Render(contract.Event{Kind: contract.KindNotice, Text: text})
	}
}

type line struct {
	text string
	err  error
}

// readLines reads in line by line until its end, an error, or ctx's end;
// the channel is closed after the last line or the error.
func readLines(ctx context.Context, in io.Reader) <-chan line {
	ch := make(chan line)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), contract.MaxMessageText+1)
		for sc.Scan() {
			select {
			case ch <- line{text: sc.Text()}:
			case <-ctx.Done():
				return
			}
		}
		if err := sc.Err(); err != nil {
			select {
			case ch <- line{err: err}:
			case <-ctx.Done():
			}
		}
	}()
	return ch
}
