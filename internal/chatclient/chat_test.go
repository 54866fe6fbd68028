package chatclient

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
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
