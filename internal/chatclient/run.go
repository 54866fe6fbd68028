package chatclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
)

const helpText = `commands:
/attach PATH  attach a local file to the next message (/attach alone lists them)
/interrupt  stop the running turn
/quit       leave now
/help       this text
Ctrl-C      stop the running turn; a second Ctrl-C, or one while no turn runs, leaves
Ctrl-D      leave once the messages already typed have been answered
Any other line is sent as a message. Lines typed while a turn runs are sent
after it ends; lines typed while the control-plane is unreachable are queued
and sent when it is back.`

// Run is the interactive loop: it renders the conversation's events (the
// earlier ones After and Recent ask for first) while it reads lines from
// in. A non-empty line is sent as a message; lines arriving while the
// previously sent message's turn runs wait for it to end and are then sent
// in order. A line that cannot reach the control-plane is queued, said so,
// and sent when the control-plane answers again, with the client message
// id it was given when it was typed, so that no retry starts a second turn.
// "/interrupt" stops the running turn, "/help" lists the commands, and
// "/quit" ends Run at once. A value on Interrupts (Ctrl-C) interrupts the
// running turn; a second one, or one while no turn runs, ends Run. At the
// end of in, Run first waits for the turns of the lines sent or waiting.
//
// Run returns nil when ctx ends, on "/quit", on Ctrl-C as above and at the
// end of input; the stream's error if it fails for good (an unknown
// conversation, say); and the error reading in. A failed send is reported
// through the renderer and does not end Run.
//
// Reading in cannot be interrupted: if Run returns while a read of in is
// blocked, the goroutine reading stays blocked until that read returns.
func (s *Session) Run(ctx context.Context, in io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	r := &run{
		s: s, ctx: ctx, attached: s.Attached,
		own:        &ownMessages{ids: make(map[string]bool)},
		retries:    backoff.New(s.Client.sendRetry),
		sent:       make(chan sendResult, 1),
		interrupts: make(chan interruptResult, 1),
	}
	var hide func(contract.Event) bool
	if s.Echoed {
		hide = r.own.hide
	}
	r.f = s.follow(ctx, hide)
	defer func() {
		cancel()
		r.wg.Wait()
		<-r.f.done
		if r.retry != nil {
			r.retry.Stop()
		}
	}()
	return r.loop(readLines(ctx, in))
}

// outgoing is a typed line on its way to the control-plane.
type outgoing struct {
	req contract.SendMessageRequest // its client message id is fixed when the line is typed
	// queued is set when the user was told the line waits for the
	// control-plane. Its user.message event is then shown even when the
	// terminal echoed the line: it says the line has gone out at last.
	queued bool
}

type sendResult struct {
	resp contract.SendMessageResponse
	err  error
}

type interruptResult struct {
	resp contract.InterruptResponse
	err  error
}

// run is the state of one Run. Only Run's goroutine touches it; the
// requests it starts answer on channels.
type run struct {
	s   *Session
	ctx context.Context
	f   *follower
	own *ownMessages
	wg  sync.WaitGroup // the request goroutines; Run waits for them

	// queue holds the typed lines not yet accepted, oldest first; the
	// first is the one being sent or retried.
	queue []outgoing
	// attached are the files stored for the next line typed to name.
	attached attachments
	// sending is true while a goroutine sends queue[0]; it answers on sent.
	sending bool
	sent    chan sendResult
	// endedWhileSending is set when a turn ended during the send: a
	// turn_running answer may be about that turn.
	endedWhileSending bool
	// retry runs while queue[0] waits for the control-plane to come back.
	retry   *time.Timer
	retries *backoff.Backoff
	// interrupting is true while an interrupt request is out; it answers
	// on interrupts. No message is sent meanwhile, so the interrupt cannot
	// stop the turn of the next one.
	interrupting bool
	interrupts   chan interruptResult

	// busy is true while a turn runs that must end before the next send:
	// the turn waitTurn this session started, or, when waitTurn is "", a
	// turn someone else started (the send said turn_running).
	busy     bool
	waitTurn string
	// running is the turn the stream last showed starting and not yet
	// ending, whoever started it.
	running string
	// ended holds the latest turns the stream showed ending: a send's
	// answer can come after its turn's end was streamed (a retry after
	// a lost answer, or a fast turn).
	ended []string
	// stopAsked is set by Ctrl-C or /interrupt while a turn runs: the next
	// Ctrl-C leaves. ctrlCPending holds a Ctrl-C that came while a line
	// was being sent: whether it interrupts or leaves depends on the
	// answer (a turn started, or no turn runs).
	stopAsked, ctrlCPending bool
	eof                     bool
}

const maxEnded = 16

// loop runs until Run's end.
func (r *run) loop(lines <-chan line) error {
	for {
		r.startSend()
		if r.eof && len(r.queue) == 0 && !r.busy && !r.sending && !r.interrupting {
			return nil
		}
		input := lines
		if r.eof || r.sending || r.interrupting {
			// Commands and lines are handled in the order typed: the next
			// waits for the answer to the one before.
			input = nil
		}
		var retry <-chan time.Time
		if r.retry != nil {
			retry = r.retry.C
		}
		select {
		case <-r.ctx.Done():
			return nil
		case <-r.f.done:
			return r.f.result(r.ctx)
		case ev := <-r.f.turns:
			r.turnEvent(ev)
		case res := <-r.sent:
			if r.ctx.Err() != nil {
				return nil
			}
			r.sendDone(res)
			if r.ctrlCPending {
				r.ctrlCPending = false
				if !r.active() {
					return r.leave()
				}
				r.stop()
			}
		case res := <-r.interrupts:
			if r.ctx.Err() != nil {
				return nil
			}
			r.interruptDone(res)
		case <-retry:
			r.retry = nil
		case <-r.s.Interrupts:
			r.drainTurns() // what the user has seen happen counts
			switch {
			case r.stopAsked || r.ctrlCPending:
				return r.leave()
			case r.sending && !r.queue[0].queued:
				r.ctrlCPending = true
			case !r.active():
				return r.leave()
			default:
				r.stop()
			}
		case l, ok := <-input:
			if !ok {
				r.eof = true
				continue
			}
			if l.err != nil {
				return fmt.Errorf("chatclient: reading input: %w", l.err)
			}
			text := strings.TrimSpace(l.text)
			if path, ok := strings.CutPrefix(text, "/attach"); ok && (path == "" || path[0] == ' ') {
				r.attach(strings.TrimSpace(path))
				continue
			}
			switch text {
			case "":
			case "/quit", "/exit":
				return r.leave()
			case "/help":
				r.s.notice(helpText)
			case "/interrupt":
				r.stopAsked = true
				r.startInterrupt()
			default:
				o := outgoing{req: r.attached.request(contract.SendMessageRequest{ClientMessageID: NewMessageID(), Text: text})}
				r.attached = nil
				if len(r.queue) > 0 && r.queue[0].queued {
					o.queued = true
					r.s.notice("message queued; it is sent when the control-plane is back")
				} else if r.s.Echoed {
					r.own.add(o.req.ClientMessageID)
				}
				r.queue = append(r.queue, o)
			}
		}
	}
}

// attach answers "/attach PATH": the file is stored now, and the next
// message sent names it; "/attach" alone lists the files it will name.
func (r *run) attach(path string) {
	if path == "" {
		if len(r.attached) == 0 {
			r.s.notice("no file attached; /attach PATH attaches one to the next message")
			return
		}
		lines := make([]string, len(r.attached))
		for i, a := range r.attached {
			lines[i] = "  " + a.Path + " (" + contract.AttachmentSize(a.Size) + ")"
		}
		r.s.notice("attached to the next message:\n" + strings.Join(lines, "\n"))
		return
	}
	as, a, err := r.s.attachFile(r.ctx, r.attached, path)
	if err != nil {
		r.s.notice("attach failed: " + err.Error())
		return
	}
	r.attached = as
	r.s.notice(fmt.Sprintf("attached %s (%s); it goes with the next message", a.Path, contract.AttachmentSize(a.Size)))
}

// active reports whether a turn runs, as far as this session knows: what
// Ctrl-C would interrupt.
func (r *run) active() bool { return r.busy || r.running != "" }

// stop answers a Ctrl-C while a turn runs.
func (r *run) stop() {
	r.stopAsked = true
	r.s.notice(interruptingText)
	if !r.interrupting {
		r.startInterrupt()
	}
}

// leave ends Run, saying what is lost.
func (r *run) leave() error {
	switch n := len(r.queue); n {
	case 0:
	case 1:
		r.s.notice("1 message not sent")
	default:
		r.s.notice(fmt.Sprintf("%d messages not sent", n))
	}
	return nil
}

// startSend sends the first queued line when nothing stands in its way.
func (r *run) startSend() {
	if len(r.queue) == 0 || r.sending || r.interrupting || r.busy || r.retry != nil {
		return
	}
	r.sending, r.endedWhileSending = true, false
	o := r.queue[0]
	attempts := sendAttempts
	if o.queued {
		attempts = 1 // Run's own retry timer paces the attempts
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		resp, err := r.s.Client.send(r.ctx, r.s.ConversationID, o.req, attempts)
		r.sent <- sendResult{resp, err}
	}()
}

func (r *run) sendDone(res sendResult) {
	r.sending = false
	switch err := res.err; {
	case err == nil:
		r.queue = r.queue[1:]
		r.retries.Reset()
		if !r.hasEnded(res.resp.TurnID) {
			r.busy, r.waitTurn = true, res.resp.TurnID
		}
	case errors.Is(err, ErrTurnRunning) && r.endedWhileSending && r.running == "":
		// The turn in the way has most likely ended since: try again (a
		// stale end costs one more turn_running answer, not a wait).
	case errors.Is(err, ErrTurnRunning):
		r.busy, r.waitTurn = true, r.running
	case unreachable(err):
		if !r.queue[0].queued {
			r.queue[0].queued = true
			r.own.forget(r.queue[0].req.ClientMessageID)
			r.s.notice("control-plane unreachable (" + cause(err) + "): message queued; it is sent when the control-plane is back")
		}
		r.retry = time.NewTimer(r.retries.Next())
	default:
		r.queue = r.queue[1:]
		r.s.notice("send failed: " + err.Error())
	}
	if !r.active() {
		r.stopAsked = false
	}
}

// unreachable reports whether a send failed without an answer from the
// control-plane.
func unreachable(err error) bool {
	var te *transportError
	return errors.As(err, &te)
}

// cause is the network error under a failed request, without the method
// and URL the terminal does not need.
func cause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

func (r *run) startInterrupt() {
	r.interrupting = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		resp, err := r.s.Client.Interrupt(r.ctx, r.s.ConversationID)
		r.interrupts <- interruptResult{resp, err}
	}()
}

func (r *run) interruptDone(res interruptResult) {
	r.interrupting = false
	switch {
	case res.err != nil:
		r.s.notice("interrupt failed: " + res.err.Error())
	case !res.resp.Interrupted:
		r.s.notice("no turn is running")
	}
	if !r.active() {
		r.stopAsked = false
	}
}

// turnEvent follows turn.started and the terminal events.
func (r *run) turnEvent(ev contract.Event) {
	if ev.Kind == contract.KindTurnStarted {
		r.running = ev.TurnID
		return
	}
	if len(r.ended) == maxEnded {
		r.ended = append(r.ended[:0], r.ended[1:]...)
	}
	r.ended = append(r.ended, ev.TurnID)
	if r.sending {
		r.endedWhileSending = true
	}
	if r.running == ev.TurnID {
		r.running = ""
	}
	if r.busy && (r.waitTurn == "" || ev.TurnID == r.waitTurn) {
		r.busy, r.waitTurn = false, ""
	}
	if !r.active() {
		r.stopAsked = false
	}
}

// drainTurns takes in the turn events the stream has handed over.
func (r *run) drainTurns() {
	for {
		select {
		case ev := <-r.f.turns:
			r.turnEvent(ev)
		default:
			return
		}
	}
}

func (r *run) hasEnded(turn string) bool {
	for _, t := range r.ended {
		if t == turn {
			return true
		}
	}
	return false
}

// ownMessages are the client message ids of the lines a Run sent, whose
// user.message events the terminal has already shown.
type ownMessages struct {
	mu  sync.Mutex // guards ids: Run adds, the follower's goroutine looks up
	ids map[string]bool
}

func (o *ownMessages) add(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids[id] = true
}

func (o *ownMessages) forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.ids, id)
}

// hide reports whether ev is the user.message of one of the ids, and
// forgets the id: the stream delivers each event once.
func (o *ownMessages) hide(ev contract.Event) bool {
	if ev.Kind != contract.KindUserMessage || ev.ClientMessageID == "" {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ids[ev.ClientMessageID] {
		return false
	}
	delete(o.ids, ev.ClientMessageID)
	return true
}
