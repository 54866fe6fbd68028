package chatclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
)

func newSession(t *testing.T, f *fakeCP, showUser bool) (*Session, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	return &Session{
		Client:         f.client(t, nil),
		ConversationID: "c1",
		Renderer:       &Renderer{W: &out, ShowUser: showUser},
	}, &out
}

// mustRun runs s on input as typed at the terminal; Run failing fails the
// test.
func mustRun(t *testing.T, s *Session, input string) {
	t.Helper()
	if err := s.Run(testCtx(t), strings.NewReader(input)); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// finishSentTurns ends each turn the fake starts, until the test ends.
func finishSentTurns(t *testing.T, f *fakeCP) {
	f.sent = make(chan string, 16)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case turn := <-f.sent:
				f.finishTurn("c1", turn, false)
			case <-done:
				return
			}
		}
	}()
}

func TestOnce(t *testing.T) {
	tests := map[string]struct {
		text    string
		wantErr error
		want    string
	}{
		"finished": {"hello", nil, "echo: hello\n\n"},
		"failed": {"fail now", ErrTurnFailed,
			"echo: fail now\n✗ turn failed (model_error): simulated\n\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFakeWithC1(t)
			s, out := newSession(t, f, false)
			err := s.Once(testCtx(t), tc.text)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("Once = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOnceWaitsForItsOwnTurn(t *testing.T) {
	f := newFakeWithC1(t)
	f.manual = true
	f.sent = make(chan string, 1)
	// History: an earlier turn that failed. After is 0, so it is replayed.
	f.finishTurn("c1", f.startTurn("c1", "old"), true)
	s, out := newSession(t, f, true)

	errc := make(chan error, 1)
	go func() { errc <- s.Once(testCtx(t), "new") }()
	turn := <-f.sent
	// A terminal event of some other turn must not end Once.
	f.mu.Lock()
	f.appendLocked(f.convLocked("c1"), contract.Event{Kind: contract.KindTurnFailed, TurnID: "t_other",
		Failure: &contract.TurnFailure{Code: contract.FailInternal, Message: "not yours"}})
	f.mu.Unlock()
	f.finishTurn("c1", turn, false)
	if err := <-errc; err != nil {
		t.Fatalf("Once = %v", err)
	}
	want := "> old\necho: done\n✗ turn failed (model_error): simulated\n\n" +
		"> new\n✗ turn failed (internal): not yours\n\necho: done\n\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestOnceUnknownConversation(t *testing.T) {
	f := newFakeCP(t)
	s, _ := newSession(t, f, false)
	if err := s.Once(testCtx(t), "hi"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Once = %v, want ErrNotFound", err)
	}
}

func TestRunQuit(t *testing.T) {
	f := newFakeWithC1(t)
	s, _ := newSession(t, f, false)
	mustRun(t, s, "\n  /quit  \nnot sent\n")
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sendIDs) != 0 {
		t.Errorf("sent %d messages, want none", len(f.sendIDs))
	}
}

func TestRunSendsLinesInTurn(t *testing.T) {
	f := newFakeWithC1(t)
	f.manual = true
	finishSentTurns(t, f)
	s, out := newSession(t, f, true)
	// "two" arrives while "one" runs: it must wait, not collide (409).
	mustRun(t, s, "one\n\n  two  \n")
	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff([]string{"one", "two"}, f.sentTexts); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	if f.conflicts != 0 {
		t.Errorf("%d sends were refused with 409", f.conflicts)
	}
	if diff := cmp.Diff("> one\necho: done\n\n> two\necho: done\n\n", out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestRunWaitsForSomeoneElsesTurn(t *testing.T) {
	f := newFakeWithC1(t)
	f.manual = true
	other := f.startTurn("c1", "from the browser")
	f.conflict = make(chan struct{}, 1)
	finishSentTurns(t, f)
	s, out := newSession(t, f, false)
	s.After = 2 // the state's LastSeq: only what comes next

	errc := make(chan error, 1)
	go func() { errc <- s.Run(testCtx(t), strings.NewReader("mine\n")) }()
	<-f.conflict
	f.finishTurn("c1", other, false)
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff([]string{"mine"}, f.sentTexts); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("echo: done\n\necho: done\n\n", out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestRunInterrupt(t *testing.T) {
	f := newFakeWithC1(t)
	f.manual = true // the turn runs until interrupted
	s, out := newSession(t, f, true)
	mustRun(t, s, "hello\n/interrupt\n/interrupt\n")
	f.mu.Lock()
	if f.interrupts != 2 {
		t.Errorf("%d interrupts, want 2", f.interrupts)
	}
	f.mu.Unlock()
	// The second /interrupt may be handled before or after the stream
	// delivers the turn's end, so only the prefix is certain.
	want := "> hello\n✗ turn failed (interrupted): interrupted by user\n\n"
	got := strings.Replace(out.String(), "! no turn is running\n", "", 1)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "! no turn is running\n") {
		t.Errorf("output %q lacks the notice for the idle interrupt", out.String())
	}
}

func TestRunReportsSendFailure(t *testing.T) {
	f := newFakeWithC1(t)
	f.sendFail = 100
	s, out := newSession(t, f, false)
	mustRun(t, s, "hello\n")
	want := "! send failed: chatclient: HTTP 503 unavailable: worker starting\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestRunEnds(t *testing.T) {
	tests := map[string]struct {
		conv   string
		cancel bool
		check  func(error) bool
	}{
		"unknown conversation": {conv: "nope", check: func(err error) bool { return errors.Is(err, ErrNotFound) }},
		"context ended":        {conv: "c1", cancel: true, check: func(err error) bool { return err == nil }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFakeWithC1(t)
			s, _ := newSession(t, f, false)
			s.ConversationID = tc.conv
			// Input that never ends, like an idle terminal.
			pr, pw := io.Pipe()
			defer pw.Close()
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			if tc.cancel {
				cancel()
			}
			if err := s.Run(ctx, pr); !tc.check(err) {
				t.Errorf("Run = %v", err)
			}
		})
	}
}

func TestRunInputError(t *testing.T) {
	f := newFakeWithC1(t)
	s, _ := newSession(t, f, false)
	broken := errors.New("tty gone")
	if err := s.Run(testCtx(t), io.MultiReader(strings.NewReader("/help\n"), errReader{broken})); !errors.Is(err, broken) {
		t.Errorf("Run = %v, want %v", err, broken)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
