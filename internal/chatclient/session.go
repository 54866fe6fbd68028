package chatclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/talkide/platform/internal/contract"
)

// Session is a terminal chat on one conversation: its events stream to
// Renderer while messages are sent.
type Session struct {
	Client         *Client
	ConversationID string
	Renderer       *Renderer // nil renders nothing
	// After is the seq of the newest event when the conversation was
	// opened (its SessionState.LastSeq): events after it are rendered as
	// they come, and Recent says which of those up to it are shown first.
	// 0 (a new conversation) shows every event.
	After int64
	// Recent is how many of the turns up to After are shown, each with the
	// session events before it, followed by whatever came after the last
	// of them (a notice of the session reopening, say). RecentAll shows
	// every earlier event, 0 none. Showing some but not all reads the log
	// from its start and keeps only those turns.
	Recent int
	// Interrupts delivers the user's Ctrl-C; Chat wires the process's
	// os.Interrupt to it (this package never subscribes to signals). While a turn runs, the first
	// one interrupts the turn; the next one, or one while no turn runs,
	// leaves. Nil: Ctrl-C is not the session's business.
	Interrupts <-chan os.Signal
	// Echoed says the terminal already shows each line as it is typed: Run
	// then does not render the user.message events of the lines it sends,
	// which would show every line twice. Other clients' messages are still
	// shown when the Renderer's ShowUser is set.
	Echoed bool
	// Attached are files already stored (Client.Attach) that the first
	// message Run sends names.
	Attached []contract.Attachment
}

// ErrQuit is returned by Once when the user left (a second Ctrl-C) before
// the turn ended.
var ErrQuit = errors.New("chatclient: left before the turn ended")

// interruptingText answers the first Ctrl-C of a running turn.
const interruptingText = "interrupting the turn (Ctrl-C again to leave)"

// Once sends text, naming the files attached (stored already), renders
// events until the turn it started ends, and returns: nil when the turn
// finished, an error wrapping ErrTurnFailed when it failed (an interrupted
// turn fails), ErrQuit when a second Ctrl-C came before the turn ended,
// ctx's error when ctx ended first. The first Ctrl-C interrupts the turn.
func (s *Session) Once(ctx context.Context, text string, attached ...contract.Attachment) error {
	ctx, cancel := context.WithCancel(ctx)
	f := s.follow(ctx, nil)
	var wg sync.WaitGroup // the interrupt request
	defer func() { cancel(); wg.Wait(); <-f.done }()

	req := attachments(attached).request(contract.SendMessageRequest{ClientMessageID: NewMessageID(), Text: text})
	resp, err := s.Client.SendMessage(ctx, s.ConversationID, req)
	if err != nil {
		return err
	}
	interrupted := make(chan error, 1)
	asked := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.done:
			if err := f.result(ctx); err != nil {
				return err
			}
			return ctx.Err()
		case <-s.Interrupts:
			if asked {
				return ErrQuit
			}
			asked = true
			s.notice(interruptingText)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Client.Interrupt(ctx, s.ConversationID)
				interrupted <- err
			}()
		case err := <-interrupted:
			if err != nil && ctx.Err() == nil {
				s.notice("interrupt failed: " + err.Error())
			}
		case ev := <-f.turns:
			if ev.TurnID != resp.TurnID || !contract.Terminal(ev.Kind) {
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
	// turns receives the turn.started, turn.finished and turn.failed
	// events, in order, just before they are rendered (a reader that
	// returns on one still sees it rendered: it waits for done). The
	// stream waits while it is full.
	turns chan contract.Event
	done  chan struct{} // closed when the stream has returned
	err   error         // what Stream returned; read only after done
}

// follow starts streaming, first replaying the earlier events After and
// Recent ask for; events hide reports are not rendered (nil hides none).
// The stream stops when ctx ends, and the caller waits for done before it
// returns.
func (s *Session) follow(ctx context.Context, hide func(contract.Event) bool) *follower {
	f := &follower{turns: make(chan contract.Event, 16), done: make(chan struct{})}
	from := s.After
	var window *recentTurns // the earlier turns, until the last of them is read
	if s.After > 0 && s.Recent != 0 {
		from = 0
		if s.Recent > 0 {
			window = &recentTurns{n: s.Recent}
		}
	}
	deliver := func(ev contract.Event) error {
		if ev.Kind == contract.KindTurnStarted || contract.Terminal(ev.Kind) {
			// Handed over before it is rendered: once the user sees a turn
			// end, a Ctrl-C is judged knowing it ended.
			select {
			case f.turns <- ev:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if s.Renderer != nil && (hide == nil || !hide(ev)) {
			s.Renderer.Render(ev)
		}
		return nil
	}
	go func() {
		defer close(f.done)
		f.err = s.Client.Stream(ctx, s.ConversationID, from, func(ev contract.Event) error {
			if window == nil {
				return deliver(ev)
			}
			if ev.Seq <= s.After {
				window.add(ev)
			}
			if ev.Seq < s.After {
				return nil
			}
			// The history is read (or its last event was never recorded
			// and a newer one came): show what was kept, then go live.
			evs, hidden := window.take()
			window = nil
			switch hidden {
			case 0:
			case 1:
				s.notice("1 earlier turn not shown")
			default:
				s.notice(fmt.Sprintf("%d earlier turns not shown", hidden))
			}
			for _, e := range evs {
				if err := deliver(e); err != nil {
					return err
				}
			}
			if ev.Seq > s.After {
				return deliver(ev)
			}
			return nil
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
