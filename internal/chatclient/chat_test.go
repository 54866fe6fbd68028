package chatclient

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/talkide/platform/internal/contract"
)

func TestChat(t *testing.T) {
	f := newFakeCP(t)
	f.token = "tka_a.secret"
	f.addConv("c1", 0)
	var out bytes.Buffer
	o := ChatOptions{Token: f.token, ConversationID: "c1", Message: "hello", Out: &out}
	if err := Chat(testCtx(t), f.srv.URL, o); err != nil {
		t.Fatalf("Chat -m: %v", err)
	}
	if !strings.Contains(out.String(), "echo: hello") {
		t.Errorf("Chat -m printed %q", out.String())
	}
	o.Message = "fail now"
	if err := Chat(testCtx(t), f.srv.URL, o); !errors.Is(err, ErrTurnFailed) {
		t.Errorf("Chat -m of a failing turn = %v, want ErrTurnFailed", err)
	}
	// Interactive: a new conversation is named, a line is sent, /quit leaves.
	out.Reset()
	f.sent = make(chan string, 1)
	o = ChatOptions{Token: f.token, ConversationID: "c2", Out: &out, In: strings.NewReader("/quit\n")}
	if err := Chat(testCtx(t), f.srv.URL, o); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if !strings.HasPrefix(out.String(), "conversation c2 (type /help for commands)\n") {
		t.Errorf("Chat printed %q", out.String())
	}
	o.Token = "tka_b.wrong"
	if err := Chat(testCtx(t), f.srv.URL, o); !isStatus(err, 401) {
		t.Errorf("Chat with a wrong token = %v, want a 401", err)
	}
}

// TestSplitSignals: Ctrl-C goes to the session, SIGTERM ends the chat, and
// stop waits for the goroutine that sorts them.
func TestSplitSignals(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	ctx, ints, stop := splitSignals(t.Context(), sigs)
	sigs <- os.Interrupt
	if s := <-ints; s != os.Interrupt {
		t.Errorf("interrupts got %v", s)
	}
	if ctx.Err() != nil {
		t.Fatal("Ctrl-C ended the chat")
	}
	sigs <- syscall.SIGTERM
	<-ctx.Done()
	stop()
	stop() // a second stop is harmless

	_, _, stop = splitSignals(t.Context(), nil)
	stop()
}

func isStatus(err error, status int) bool {
	ae, ok := errors.AsType[*APIError](err)
	return ok && ae.Status == status
}

// writeFiles writes name → content files into a new directory and
// returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestChatAttach: -m with --attach stores each file (a hidden file's name
// mended, the server's refusal for want of room sent again) and the
// message names them, as the web UI's do; a file that cannot go stops
// Chat before anything is sent.
func TestChatAttach(t *testing.T) {
	f := newFakeWithC1(t)
	f.attachFail = 2
	dir := writeFiles(t, map[string]string{"build.log": "error: it broke\n", ".env.sample": "K=v\n", "empty": ""})
	var out bytes.Buffer
	o := ChatOptions{ConversationID: "c1", Message: "What went wrong?", Out: &out,
		Attach: []string{filepath.Join(dir, "build.log"), filepath.Join(dir, ".env.sample")}}
	client := f.client(t, nil) // for its fast retries
	if err := chatWith(testCtx(t), client, o); err != nil {
		t.Fatalf("Chat -m --attach: %v\n%s", err, out.String())
	}
	want := "What went wrong?\n\nAttached: attachments/build.log (16 B)\nAttached: attachments/env.sample (4 B)"
	f.mu.Lock()
	texts, files, stored := slices.Clone(f.sentTexts), slices.Clone(f.sentFiles), slices.Clone(f.attached)
	f.mu.Unlock()
	if len(texts) != 1 || texts[0] != want {
		t.Fatalf("sent %q, want %q", texts, want)
	}
	if len(files) != 1 || !slices.Equal(files[0], []string{"attachments/build.log", "attachments/env.sample"}) {
		t.Errorf("the message named %q", files)
	}
	if !slices.Equal(stored, []string{"attachments/build.log:error: it broke\n", "attachments/env.sample:K=v\n"}) {
		t.Errorf("stored %q", stored)
	}

	for name, path := range map[string]string{
		"missing":   filepath.Join(dir, "nope.txt"),
		"empty":     filepath.Join(dir, "empty"),
		"directory": dir,
	} {
		o.Attach = []string{filepath.Join(dir, "build.log"), path}
		if err := chatWith(testCtx(t), client, o); err == nil {
			t.Errorf("%s: Chat attached %s", name, path)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sentTexts) != 1 {
		t.Errorf("a message went with a file that could not: %q", f.sentTexts[1:])
	}
}

// TestAttachBounds: a file over 10 MiB is refused before it is read or
// sent, and a message's files stay within 10 and 25 MiB together.
func TestAttachBounds(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.log")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, contract.MaxAttachmentBytes+1); err != nil {
		t.Fatal(err)
	}
	if _, err := readAttachment(huge); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("readAttachment of 10 MiB + 1 = %v", err)
	}
	var as attachments
	for range contract.MaxAttachments {
		if why := as.room(1); why != "" {
			t.Fatalf("file %d refused: %s", len(as)+1, why)
		}
		as = append(as, contract.Attachment{Size: 1})
	}
	if why := as.room(1); !strings.Contains(why, "at most 10 files") {
		t.Errorf("an 11th file: %q", why)
	}
	as = attachments{{Size: 10 << 20}, {Size: 10 << 20}}
	if why := as.room(5<<20 + 1); !strings.Contains(why, "25 MiB together") {
		t.Errorf("past 25 MiB: %q", why)
	}
	if why := as.room(5 << 20); why != "" {
		t.Errorf("exactly 25 MiB: %q", why)
	}
	if _, err := (&Client{}).Attach(testCtx(t), "c1", "x", make([]byte, contract.MaxAttachmentBytes+1)); err == nil {
		t.Error("Attach sent 10 MiB + 1")
	}
}

// TestRunAttach: /attach stores a file for the next line typed, which
// names it; /attach alone lists what is waiting; a file that cannot be
// stored is said so and the session goes on.
func TestRunAttach(t *testing.T) {
	f := newFakeWithC1(t)
	dir := writeFiles(t, map[string]string{"a.txt": "aa", "b.txt": "bbb"})
	s, out := newSession(t, f, false)
	input := "/attach\n/attach " + filepath.Join(dir, "a.txt") + "\n/attach " + filepath.Join(dir, "missing") + "\n/attach " + filepath.Join(dir, "b.txt") + "\n/attach\nlook\nagain\n"
	mustRun(t, s, input)
	f.mu.Lock()
	texts, files := slices.Clone(f.sentTexts), slices.Clone(f.sentFiles)
	f.mu.Unlock()
	want := []string{"look\n\nAttached: attachments/a.txt (2 B)\nAttached: attachments/b.txt (3 B)", "again"}
	if !slices.Equal(texts, want) {
		t.Fatalf("sent %q, want %q", texts, want)
	}
	if len(files) != 2 || !slices.Equal(files[0], []string{"attachments/a.txt", "attachments/b.txt"}) || files[1] != nil {
		t.Errorf("the messages named %q", files)
	}
	for _, said := range []string{
		"no file attached; /attach PATH attaches one",
		"attached attachments/a.txt (2 B); it goes with the next message",
		"attach failed: ",
		"attached to the next message:",
		"  attachments/b.txt (3 B)\n",
	} {
		if !strings.Contains(out.String(), said) {
			t.Errorf("the session did not say %q:\n%s", said, out.String())
		}
	}
}
