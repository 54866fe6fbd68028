package chatclient

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/talkide/platform/internal/syncbuf"

	"github.com/google/go-cmp/cmp"
)

// liveSession is a Session over f's conversation c1 whose input the test
// types and whose Ctrl-C it presses.
type liveSession struct {
	s     *Session
	out   *syncbuf.Buffer
	in    *io.PipeWriter
	ctrlC chan os.Signal
	errc  chan error
}

func startLive(t *testing.T, c *Client, configure func(*Session)) *liveSession {
	t.Helper()
	l := &liveSession{out: &syncbuf.Buffer{}, ctrlC: make(chan os.Signal, 1), errc: make(chan error, 1)}
	l.s = &Session{Client: c, ConversationID: "c1", Renderer: &Renderer{W: l.out, ShowUser: true}, Interrupts: l.ctrlC}
	if configure != nil {
		configure(l.s)
	}
	pr, pw := io.Pipe()
	l.in = pw
	t.Cleanup(func() { pw.Close() })
	ctx := testCtx(t)
	go func() { l.errc <- l.s.Run(ctx, pr) }()
	return l
}

func (l *liveSession) typeLine(t *testing.T, text string) {
	t.Helper()
	if _, err := io.WriteString(l.in, text+"\n"); err != nil {
		t.Fatal(err)
	}
}

// wait returns what Run returned.
func (l *liveSession) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-l.errc:
		return err
	case <-testCtx(t).Done():
		t.Fatalf("Run did not return; output:\n%s", l.out.String())
		return nil
	}
}

func TestRunCtrlCInterruptsTheTurnAndGoesOn(t *testing.T) {
	ctx := testCtx(t)
	f := newFakeWithC1(t)
	f.interrupted = make(chan struct{}, 1)
	l := startLive(t, f.client(t, nil), nil)

	l.typeLine(t, "slow one") // stays running until interrupted
	waitFor(ctx, t, l.out, "> slow one\n", 1)
	l.ctrlC <- os.Interrupt
	<-f.interrupted
	waitFor(ctx, t, l.out, "turn failed (interrupted)", 1)
	// The client is still there: the next line is sent and answered.
	l.typeLine(t, "two")
	waitFor(ctx, t, l.out, "echo: two", 1)
	l.in.Close()
	if err := l.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	want := "> slow one\n! interrupting the turn (Ctrl-C again to leave)\n" +
		"✗ turn failed (interrupted): interrupted by user\n\n> two\necho: two\n\n"
	if diff := cmp.Diff(want, l.out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.interrupts != 1 {
		t.Errorf("%d interrupts, want 1", f.interrupts)
	}
}

func TestRunSecondCtrlCLeaves(t *testing.T) {
	f := newFakeWithC1(t)
	f.interrupted = make(chan struct{}, 1)
	f.holdInterrupts = make(chan struct{}) // the interrupt takes its time
	l := startLive(t, f.client(t, nil), nil)

	l.typeLine(t, "slow one")
	waitFor(testCtx(t), t, l.out, "> slow one\n", 1)
	l.ctrlC <- os.Interrupt
	<-f.interrupted
	l.ctrlC <- os.Interrupt
	// The input stays open: only Ctrl-C can have ended Run.
	if err := l.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := strings.Count(l.out.String(), interruptingText); got != 1 {
		t.Errorf("output says %q %d times, want once:\n%s", interruptingText, got, l.out.String())
	}
}

func TestRunCtrlCWithoutTurnLeaves(t *testing.T) {
	tests := map[string]struct {
		history func(f *fakeCP)
		seen    string   // shown before Ctrl-C
		lines   []string // typed and answered before Ctrl-C
	}{
		"new conversation":      {},
		"after a finished turn": {lines: []string{"hello"}},
		"a finished turn in the history": {history: func(f *fakeCP) {
			f.finishTurn("c1", f.startTurn("c1", "old"), false)
		}, seen: "echo: done\n\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFakeWithC1(t)
			if tc.history != nil {
				tc.history(f)
			}
			l := startLive(t, f.client(t, nil), nil)
			if tc.seen != "" {
				waitFor(testCtx(t), t, l.out, tc.seen, 1)
			}
			for _, line := range tc.lines {
				l.typeLine(t, line)
				waitFor(testCtx(t), t, l.out, "echo: "+line+"\n\n", 1)
			}
			l.ctrlC <- os.Interrupt
			if err := l.wait(t); err != nil {
				t.Fatalf("Run = %v", err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.interrupts != 0 {
				t.Errorf("%d interrupts, want none", f.interrupts)
			}
			if strings.Contains(l.out.String(), interruptingText) {
				t.Errorf("output %q says it interrupts", l.out.String())
			}
		})
	}
}

func TestRunCtrlCStopsSomeoneElsesTurn(t *testing.T) {
	// The browser's turn runs; the line typed here waits for it (409), and
	// Ctrl-C interrupts that turn.
	ctx := testCtx(t)
	f := newFakeWithC1(t)
	f.manual = true
	f.startTurn("c1", "from the browser")
	f.conflict = make(chan struct{}, 1)
	f.interrupted = make(chan struct{}, 1)
	finishSentTurns(t, f)
	l := startLive(t, f.client(t, nil), func(s *Session) { s.After = 2 })
	l.typeLine(t, "mine")
	<-f.conflict
	l.ctrlC <- os.Interrupt
	<-f.interrupted
	waitFor(ctx, t, l.out, "turn failed (interrupted)", 1)
	l.in.Close()
	if err := l.wait(t); err != nil { // "mine" went out after the interrupt
		t.Fatalf("Run = %v", err)
	}
	f.wantSent(t, "mine")
}

func TestOnceCtrlC(t *testing.T) {
	tests := map[string]struct {
		presses int
		hold    bool
		wantErr error
	}{
		"once interrupts the turn":    {presses: 1, wantErr: ErrTurnFailed},
		"twice leaves before it ends": {presses: 2, hold: true, wantErr: ErrQuit},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFakeWithC1(t)
			f.sent = make(chan string, 1)
			f.interrupted = make(chan struct{}, 1)
			if tc.hold {
				f.holdInterrupts = make(chan struct{})
			}
			ctrlC := make(chan os.Signal, 1)
			s, _ := newSession(t, f, false)
			s.Interrupts = ctrlC
			errc := make(chan error, 1)
			go func() { errc <- s.Once(testCtx(t), "slow") }()
			<-f.sent
			ctrlC <- os.Interrupt
			<-f.interrupted
			if tc.presses > 1 {
				ctrlC <- os.Interrupt
			}
			if err := <-errc; !errors.Is(err, tc.wantErr) {
				t.Fatalf("Once = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestRunEchoedHidesOwnLines(t *testing.T) {
	f := newFakeWithC1(t)
	f.finishTurn("c1", f.startTurn("c1", "from the browser"), false)
	f.manual = true
	finishSentTurns(t, f)
	s, out := newSession(t, f, true)
	s.Echoed = true // the terminal shows "one" and "two" as they are typed
	mustRun(t, s, "one\ntwo\n")
	want := "> from the browser\necho: done\n\necho: done\n\necho: done\n\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestRunHelpMentionsCtrlC(t *testing.T) {
	f := newFakeWithC1(t)
	s, out := newSession(t, f, false)
	mustRun(t, s, "/help\n")
	for _, want := range []string{"! commands:", "Ctrl-C      stop the running turn; a second Ctrl-C", "Ctrl-D", "queued"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help %q lacks %q", out.String(), want)
		}
	}
}

func TestRunQueuesWhileControlPlaneIsDown(t *testing.T) {
	ctx := testCtx(t)
	f, p, c := behindProxy(t)
	l := startLive(t, c, func(s *Session) { s.Echoed = true })

	p.Down()
	l.typeLine(t, "first while down")
	waitFor(ctx, t, l.out, "control-plane unreachable", 1)
	l.typeLine(t, "second while down")
	waitFor(ctx, t, l.out, "message queued", 2)
	f.mu.Lock()
	if n := len(f.sendIDs); n != 0 {
		t.Errorf("%d send requests reached the control-plane while it was down", n)
	}
	f.mu.Unlock()
	p.Up()
	waitFor(ctx, t, l.out, "echo: second while down\n\n", 1)
	l.in.Close()
	if err := l.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff([]string{"first while down", "second while down"}, f.sentTexts); diff != "" {
		t.Errorf("turns started (-want +got):\n%s", diff)
	}
	if len(f.sendIDs) != 2 || f.sendIDs[0] == f.sendIDs[1] {
		t.Errorf("send requests %v, want one per line", f.sendIDs)
	}
	out := l.out.String()
	for _, want := range []string{
		"> first while down\necho: first while down\n\n",
		"> second while down\necho: second while down\n\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRunQueuedMessageKeepsItsID(t *testing.T) {
	// Every answer to the first tries is lost although the control-plane
	// started the turn: the message is queued, and its retry, with the same
	// client message id, gets that turn instead of starting another.
	f := newFakeWithC1(t)
	f.dropAnswers = sendAttempts
	s, out := newSession(t, f, false)
	mustRun(t, s, "hello\n")
	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff([]string{"hello"}, f.sentTexts); diff != "" {
		t.Errorf("turns started (-want +got):\n%s", diff)
	}
	if len(f.sendIDs) != sendAttempts+1 {
		t.Errorf("%d send requests, want %d", len(f.sendIDs), sendAttempts+1)
	}
	for _, id := range f.sendIDs {
		if id != f.sendIDs[0] {
			t.Errorf("client message ids %v differ", f.sendIDs)
			break
		}
	}
	if !strings.Contains(out.String(), "message queued") || !strings.Contains(out.String(), "echo: hello\n") {
		t.Errorf("output %q does not show the message queued and sent", out.String())
	}
}

func TestRunLeavingSaysWhatIsNotSent(t *testing.T) {
	_, p, c := behindProxy(t)
	l := startLive(t, c, nil)
	p.Down()
	l.typeLine(t, "lost")
	waitFor(testCtx(t), t, l.out, "message queued", 1)
	l.ctrlC <- os.Interrupt // no turn runs: leave
	if err := l.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !strings.HasSuffix(l.out.String(), "! 1 message not sent\n") {
		t.Errorf("output %q does not end saying the message was not sent", l.out.String())
	}
}

// The turn a send started can end before its answer comes: Run must not
// wait for that turn's end again.
func TestRunAnswerAfterTurnEnded(t *testing.T) {
	f := newFakeWithC1(t)
	f.dropAnswers = 1 // the retry's answer comes after the turn ended
	s, _ := newSession(t, f, false)
	mustRun(t, s, "a\nb\n")
	f.wantSent(t, "a", "b")
}
