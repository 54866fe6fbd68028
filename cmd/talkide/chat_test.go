package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/proxytest"
	"github.com/talkide/platform/internal/syncbuf"
)

// These tests run talkide chat against the whole stack with the model
// simulator, typing into it through a pipe (so nothing echoes the lines).

// waitFor returns once out holds s, failing the test after 30 s.
func waitFor(t *testing.T, out *syncbuf.Buffer, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got, err := out.Wait(ctx, func(got string) bool { return strings.Contains(got, s) }); err != nil {
		t.Fatalf("chat never printed %q; output:\n%s", s, got)
	}
}

// liveChat is a talkide chat in a goroutine.
type liveChat struct {
	out     *syncbuf.Buffer
	in      *io.PipeWriter
	errc    chan error
	signals chan os.Signal // what main would deliver; nil: none
}

func startChat(t *testing.T, ctx context.Context, args ...string) *liveChat {
	t.Helper()
	return startChatSignals(t, ctx, nil, args...)
}

// startChatSignals starts a chat that receives the signals on sigs, as
// main delivers them.
func startChatSignals(t *testing.T, ctx context.Context, sigs chan os.Signal, args ...string) *liveChat {
	t.Helper()
	c := &liveChat{out: &syncbuf.Buffer{}, errc: make(chan error, 1), signals: sigs}
	pr, pw := io.Pipe()
	c.in = pw
	t.Cleanup(func() { pw.Close() })
	var stderr syncbuf.Buffer
	go func() { c.errc <- chatWith(ctx, args, pr, c.out, &stderr, c.signals) }()
	waitFor(t, c.out, "(type /help for commands)\n")
	return c
}

func (c *liveChat) typeLine(t *testing.T, text string) {
	t.Helper()
	if _, err := io.WriteString(c.in, text+"\n"); err != nil {
		t.Fatal(err)
	}
}

// end closes the input and returns what the chat returned.
func (c *liveChat) end(t *testing.T) error {
	t.Helper()
	c.in.Close()
	return c.wait(t)
}

func (c *liveChat) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-c.errc:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("chat did not return; output:\n%s", c.out.String())
		return nil
	}
}

func chatCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestChatShowsTheNoticeOfANewConversation(t *testing.T) {
	st, _ := startTestStack(t)
	ctx := chatCtx(t)

	c := startChat(t, ctx, "--addr", st.Info.ControlPlane)
	c.typeLine(t, "hello")
	waitFor(t, c.out, "you said: hello")
	if err := c.end(t); err != nil {
		t.Fatalf("chat: %v", err)
	}
	out := c.out.String()
	notice := strings.Index(out, "! model simulator in use")
	if notice < 0 || notice > strings.Index(out, "you said: hello") {
		t.Errorf("the simulator's notice is not shown before the reply:\n%s", out)
	}

	var once bytes.Buffer
	if err := chatWith(ctx, []string{"--addr", st.Info.ControlPlane, "--conversation", "notice-once", "-m", "hi"}, strings.NewReader(""), &once, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(once.String(), "! model simulator in use") {
		t.Errorf("chat -m on a new conversation printed no notice:\n%s", once.String())
	}
}

func TestChatReopenShowsRecentTurns(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	ctx := chatCtx(t)
	tests := map[string]struct {
		args   []string
		shown  []string
		hidden []string
	}{
		"default": {
			shown:  []string{"! 2 earlier turns not shown", "> alpha3", "you said: alpha3", "you said: alpha5"},
			hidden: []string{"alpha1", "alpha2", "model simulator in use"}},
		"--recent 1": {args: []string{"--recent", "1"},
			shown:  []string{"! 4 earlier turns not shown", "> alpha5", "you said: alpha5"},
			hidden: []string{"alpha4"}},
		"--recent none": {args: []string{"--recent", "none"},
			hidden: []string{"alpha", "earlier turn"}},
		"--recent all": {args: []string{"--recent", "all"},
			shown:  []string{"! model simulator in use", "> alpha1", "you said: alpha1", "you said: alpha5"},
			hidden: []string{"earlier turn"}},
		"--history": {args: []string{"--history"},
			shown:  []string{"! model simulator in use", "> alpha1", "you said: alpha1", "you said: alpha5"},
			hidden: []string{"earlier turn"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			conv := "reopened" + strings.NewReplacer("-", "", " ", "-").Replace(name)
			for _, text := range []string{"alpha1", "alpha2", "alpha3", "alpha4", "alpha5"} {
				if err := chatWith(ctx, []string{"--addr", base, "--conversation", conv, "-m", text}, strings.NewReader(""), io.Discard, io.Discard); err != nil {
					t.Fatalf("chat -m %s: %v", text, err)
				}
			}
			c := startChat(t, ctx, append([]string{"--addr", base, "--conversation", conv}, tc.args...)...)
			line := "now " + strings.ReplaceAll(name, "-", "")
			c.typeLine(t, line)
			waitFor(t, c.out, "you said: "+line)
			if err := c.end(t); err != nil {
				t.Fatalf("chat: %v", err)
			}
			out := c.out.String()
			for _, s := range tc.shown {
				if !strings.Contains(out, s) || strings.Index(out, s) > strings.Index(out, "> "+line) {
					t.Errorf("%q is not shown before the new line:\n%s", s, out)
				}
			}
			for _, s := range tc.hidden {
				if strings.Contains(out, s) {
					t.Errorf("%q is shown:\n%s", s, out)
				}
			}
			if strings.Count(out, "> "+line+"\n") != 1 {
				t.Errorf("the typed line is not shown exactly once:\n%s", out)
			}
		})
	}
}

func TestChatRejectsBadHistoryFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--recent", "some"},
		{"--recent", "-2"},
		{"--history", "--recent", "2"},
	} {
		// The flags are checked before any connection is made.
		err := chatWith(context.Background(), append([]string{"--addr", "http://127.0.0.1:1"}, args...), strings.NewReader(""), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "recent") {
			t.Errorf("chat %v = %v, want an error about --recent", args, err)
		}
	}
}

// Ctrl-C, a real SIGINT to this process, stops the running turn and the
// chat goes on; Ctrl-C while no turn runs leaves. The context is the one
// main makes: the SIGINT must not cancel it.
func TestChatCtrlCInterruptsTheTurn(t *testing.T) {
	st, _ := startTestStack(t)
	// As main does: SIGINT and SIGTERM go to a channel the command reads.
	ctx := chatCtx(t)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	c := startChatSignals(t, ctx, sigs, "--addr", st.Info.ControlPlane)
	c.typeLine(t, "take your time [[sleep:60000]]")
	waitFor(t, c.out, "> take your time")
	ctrlC(t)
	waitFor(t, c.out, "turn failed (interrupted)")
	if ctx.Err() != nil {
		t.Fatalf("the first Ctrl-C ended the test's context: %v", ctx.Err())
	}
	// Still there. (A message would do too, but the interrupted one's
	// directive would make the simulator take its time again: an
	// interrupted turn's message joins the next one.)
	c.typeLine(t, "/help")
	waitFor(t, c.out, "! commands:")
	ctrlC(t)
	if err := c.wait(t); err != nil {
		t.Fatalf("chat: %v", err)
	}
	if !strings.Contains(c.out.String(), "! interrupting the turn (Ctrl-C again to leave)") {
		t.Errorf("the chat did not say it interrupts:\n%s", c.out.String())
	}
}

// ctrlC sends this process the SIGINT a terminal sends on Ctrl-C.
func ctrlC(t *testing.T) {
	t.Helper()
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = p.Signal(os.Interrupt)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A line typed while the control-plane is unreachable is queued and sent
// when it is back, once.
func TestChatQueuesWhileControlPlaneIsDown(t *testing.T) {
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	ctx := chatCtx(t)
	p := proxytest.New(t, strings.TrimPrefix(base, "http://"))
	const conv = "outage"

	c := startChat(t, ctx, "--addr", p.URL(), "--conversation", conv)
	p.Down()
	c.typeLine(t, "typed while down")
	waitFor(t, c.out, "message queued")
	p.Up()
	waitFor(t, c.out, "you said: typed while down")
	if err := c.end(t); err != nil {
		t.Fatalf("chat: %v", err)
	}

	// Count on the server: the conversation's log holds the message once.
	var view contractView
	if status := api(t, http.MethodGet, base+"/api/conversations/"+conv, nil, &view); status != http.StatusOK || view.State == nil {
		t.Fatalf("get conversation: status %d, %+v", status, view)
	}
	events := readStream(t, base, conv, 0, func(ev contract.Event) bool { return ev.Seq >= view.State.LastSeq })
	n := 0
	for _, e := range events {
		if e.ev.Kind == contract.KindUserMessage && e.ev.Text == "typed while down" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the message is in the conversation %d times, want once", n)
	}
	if view.State.Turns != 1 {
		t.Errorf("%d turns, want 1", view.State.Turns)
	}
}

// openPTY opens a pseudo-terminal: the test types into and reads from
// master; slave is the terminal a program is given. The line discipline
// echoes what is typed, as a user's terminal does.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pty's number: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pty's terminal: %v", err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// On a terminal, which echoes what is typed, each typed line shows once:
// the chat does not print it again (it did, as "> line", every line twice,
// with --history too).
func TestChatOnATerminalShowsTypedLinesOnce(t *testing.T) {
	master, slave := openPTY(t)
	if !isTerminal(slave) {
		t.Fatal("isTerminal(a pty) = false")
	}
	st, _ := startTestStack(t)
	base := st.Info.ControlPlane
	ctx := chatCtx(t)
	const conv = "on-a-terminal"
	if err := chatWith(ctx, []string{"--addr", base, "--conversation", conv, "-m", "earlier"}, strings.NewReader(""), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	screen := &syncbuf.Buffer{} // what the terminal shows
	go io.Copy(screen, master)  // ends when the test closes master
	errc := make(chan error, 1)
	go func() {
		errc <- chatWith(ctx, []string{"--addr", base, "--conversation", conv, "--history"}, slave, slave, io.Discard)
	}()
	waitFor(t, screen, "(type /help for commands)")
	waitFor(t, screen, "you said: earlier")
	if _, err := io.WriteString(master, "typed on a terminal\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, screen, "you said: typed on a terminal")
	if _, err := master.Write([]byte{4}); err != nil { // Ctrl-D
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("chat did not end at Ctrl-D; screen:\n%s", screen.String())
	}
	// Counted in the whole screen, not per line: the terminal echoes the
	// typed line as soon as it is written, which can land on the line the
	// earlier reply is still printing.
	all := screen.String()
	shown := strings.Count(all, "typed on a terminal") - strings.Count(all, "you said: typed on a terminal")
	if shown != 1 {
		t.Errorf("the typed line shows %d times, want once (the terminal's echo); screen:\n%s", shown, screen.String())
	}
	if !strings.Contains(screen.String(), "> earlier") {
		t.Errorf("--history does not show the earlier turn's message; screen:\n%s", screen.String())
	}
}

func TestIsTerminal(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "input"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, r := range map[string]io.Reader{"pipe": pr, "file": f, "reader": strings.NewReader("x")} {
		if isTerminal(r) {
			t.Errorf("isTerminal(%s) = true", name)
		}
	}
}

// chatWith runs talkide chat with args, as main would with these streams
// and signals.
func chatWith(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, sigs ...chan os.Signal) error {
	std := stdio{in: stdin, out: stdout, err: stderr}
	if len(sigs) > 0 && sigs[0] != nil {
		std.signals = sigs[0]
	}
	return run(ctx, append([]string{"chat"}, args...), std)
}

// chatExit runs talkide chat with args as main does, errors printed to
// stderr, and returns the exit code.
func chatExit(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return execute(ctx, append([]string{"chat"}, args...), stdio{in: stdin, out: stdout, err: stderr})
}

// pixelPNG is a PNG of one pixel, 70 bytes.
const pixelPNG = "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\xdacd\xf8\xcfP\x0f\x00\x03\x86\x01\x80Z4}k\x00\x00\x00\x00IEND\xaeB`\x82"

// TestChatCommandAttach sends a message with files attached from the
// terminal, through the whole stack: the worker stores them in the
// conversation's workspace and the model is shown the image.
func TestChatCommandAttach(t *testing.T) {
	st, _ := startTestStack(t)
	dir := t.TempDir()
	files := map[string][]byte{"shot.png": []byte(pixelPNG), "build.log": []byte("error: it broke\n")}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := run(ctx, []string{"chat", "--addr", st.Info.ControlPlane, "--conversation", "chat-attach", "-m", "what went wrong?",
		"--attach", filepath.Join(dir, "shot.png"), "--attach", filepath.Join(dir, "build.log")}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	if err != nil {
		t.Fatalf("chat: %v (%s)", err, errOut.String())
	}
	for _, want := range []string{
		"saw 1 image (image/png, 70 bytes)",
		"Attached: attachments/build.log (16 B)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("chat printed no %q:\n%s", want, out.String())
		}
	}
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(st.Info.Workspaces, "chat-attach", "attachments", name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("the workspace holds %s as %q, %v", name, got, err)
		}
	}
}
