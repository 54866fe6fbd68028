package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/gateway"
	"github.com/talkide/platform/internal/store"
)

// Titles. A conversation that has no title when its first message is sent
// is named by a small model call: the message and contract.TitlePrompt, sent
// through the gateway in process, so the call is admitted by the user's
// budget and charged to it like any other, and its usage record is marked
// store.PurposeTitle. When the call cannot be made (no model configured, no
// gateway), fails, times out or is refused by the budget, the title is the
// first words of the message, on one line. The title is written only where
// the conversation still has none (store.ConversationChange.Untitled), so a
// name the user gave, even while the call ran, is never replaced.
//
// The calls never hold up a send: the send queues the request
// (titleQueue at most, one per conversation) and RunTitles makes the calls,
// titleWorkers at a time, each bounded by TitleTimeout. A request that
// finds the queue full gets the plain title at once.

const (
	titleQueue   = 64
	titleWorkers = 2
	// DefaultTitleTimeout bounds one title call.
	DefaultTitleTimeout = 20 * time.Second
	titleMaxTokens      = 40
	maxTitleRunes       = 80
	fallbackTitleWords  = 8
	// maxTitleInput bounds the bytes of the message sent with the
	// title call: its beginning says what the conversation is about.
	maxTitleInput = 4 << 10
	// titleResponseMax bounds the bytes of the gateway's answer read.
	titleResponseMax = 64 << 10
)

var errNoTitleModel = errors.New("no title model is configured, or no gateway")

type titleJob struct {
	conv store.Conversation
	text string
}

// titles is the queue of title requests.
type titles struct {
	s    *Server
	jobs chan titleJob

	mu      sync.Mutex
	pending map[string]bool // guarded by mu: conversations queued or being named
}

func newTitles(s *Server) *titles {
	return &titles{s: s, jobs: make(chan titleJob, titleQueue), pending: map[string]bool{}}
}

// request queues a title for c, from its first message text; it never
// blocks. A conversation already queued is not queued twice.
func (t *titles) request(ctx context.Context, c store.Conversation, text string) {
	t.mu.Lock()
	if t.pending[c.ID] {
		t.mu.Unlock()
		return
	}
	t.pending[c.ID] = true
	t.mu.Unlock()
	select {
	case t.jobs <- titleJob{conv: c, text: text}:
	default:
		t.s.log.Warn("title queue full: a plain title", "conversation", c.ID)
		t.s.setTitle(ctx, c.ID, fallbackTitle(text))
		t.done(c.ID)
	}
}

func (t *titles) done(id string) {
	t.mu.Lock()
	delete(t.pending, id)
	t.mu.Unlock()
}

// RunTitles makes the title calls queued by sends until ctx ends; then it
// gives what is still queued its plain title, and returns when its calls
// have ended. The control-plane's owner runs it (internal/roles); without
// it no title call is made, and a send that finds the queue full gives the
// plain title.
func (s *Server) RunTitles(ctx context.Context) error {
	var wg sync.WaitGroup
	for range titleWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-s.titles.jobs:
					s.nameConversation(ctx, j)
				}
			}
		})
	}
	wg.Wait()
	// What was queued is named plainly: a store write each, not a call.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), indexWrite)
	defer cancel()
	for {
		select {
		case j := <-s.titles.jobs:
			s.setTitle(wctx, j.conv.ID, fallbackTitle(j.text))
			s.titles.done(j.conv.ID)
		default:
			return nil
		}
	}
}

// nameConversation gives j's conversation a title unless it has one.
func (s *Server) nameConversation(ctx context.Context, j titleJob) {
	defer s.titles.done(j.conv.ID)
	c, err := s.cfg.Store.GetConversation(ctx, j.conv.ID)
	if err != nil || c.Title != "" {
		return
	}
	title, err := s.generateTitle(ctx, c, j.text)
	if err != nil {
		if ctx.Err() != nil {
			// Stopping: RunTitles's owner waits for no more calls.
			ctx = context.WithoutCancel(ctx)
		}
		s.log.Info("title call failed: a plain title", "conversation", c.ID, "tenant", c.Tenant, "env", c.Env, "err", err)
		title = fallbackTitle(j.text)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), indexWrite)
	defer cancel()
	s.setTitle(wctx, c.ID, title)
}

// setTitle writes title where the conversation has none.
func (s *Server) setTitle(ctx context.Context, id, title string) {
	if _, err := s.cfg.Store.UpdateConversation(ctx, id, store.ConversationChange{Title: &title, Untitled: true, At: s.cfg.Now().UTC()}); err != nil {
		s.log.Warn("title not stored", "conversation", id, "err", err)
	}
}

// generateTitle asks the model for c's title through the gateway.
func (s *Server) generateTitle(ctx context.Context, c store.Conversation, text string) (string, error) {
	if s.cfg.Gateway == nil || s.cfg.TitleModel == "" {
		return "", errNoTitleModel
	}
	body, err := json.Marshal(map[string]any{
		"model":      s.cfg.TitleModel,
		"max_tokens": titleMaxTokens,
		"system":     contract.TitlePrompt,
		"messages":   []any{map[string]any{"role": "user", "content": cut(text, maxTitleInput)}},
	})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TitleTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(gateway.WithPurpose(ctx, store.PurposeTitle), http.MethodPost, GatewayPrefix+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	tok, _ := s.cfg.Keyring.MintWorkerToken(c.Tenant, c.Env, c.ID, s.cfg.Now())
	req.Header.Set(contract.TokenHeader, tok)
	req.Header.Set("Content-Type", "application/json")
	w := &bufferedResponse{header: http.Header{}}
	s.cfg.Gateway.ServeHTTP(w, req)
	if w.status != http.StatusOK {
		// The body is the gateway's error (a budget denial says which
		// limit); its first line is enough for the log.
		first, _, _ := strings.Cut(w.body.String(), "\n")
		return "", fmt.Errorf("the gateway answered %d: %s", w.status, cut(first, 300))
	}
	var msg struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(w.body.Bytes(), &msg); err != nil {
		return "", fmt.Errorf("the title call's answer: %w", err)
	}
	for _, b := range msg.Content {
		if b.Type == "text" {
			if t := cleanTitle(b.Text); t != "" {
				return t, nil
			}
		}
	}
	return "", errors.New("the title call's answer has no usable text")
}

// cleanTitle makes a model's answer a title: its first line that says
// something, without surrounding quotes, a final full stop, or characters
// a title may not hold (contract.ValidateLine), at most maxTitleRunes.
func cleanTitle(s string) string {
	for line := range strings.Lines(s) {
		t := oneLine(line)
		t = strings.Trim(t, "\"'`“”‘’«»*# ")
		t = strings.TrimRight(t, ".。")
		if t = shorten(t, maxTitleRunes); t != "" {
			return t
		}
	}
	return ""
}

// fallbackTitle is the plain title of a message: its first words, on one
// line.
func fallbackTitle(text string) string {
	words := strings.Fields(oneLine(text))
	if len(words) > fallbackTitleWords {
		words = words[:fallbackTitleWords]
	}
	if t := shorten(strings.Join(words, " "), maxTitleRunes); t != "" {
		return t
	}
	return "Untitled"
}

// oneLine drops what a title may not hold (control and format characters,
// line separators) and makes every run of white space one space.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == utf8.RuneError, unicode.Is(unicode.Cf, r):
			return -1
		case unicode.IsSpace(r), unicode.IsControl(r):
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

// shorten cuts s to at most n characters, at a space when there is one in
// its second half, and checks it as a title.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)[:n]
		if i := strings.LastIndexByte(string(r), ' '); i > len(string(r))/2 {
			s = string(r)[:i]
		} else {
			s = string(r)
		}
	}
	t, err := contract.ValidateLine("title", s, contract.MaxConversationTitle)
	if err != nil {
		return ""
	}
	return t
}

// bufferedResponse is the ResponseWriter of the in-process title call: the
// status and up to titleResponseMax bytes of the body.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *bufferedResponse) Header() http.Header { return w.header }

func (w *bufferedResponse) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *bufferedResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if room := titleResponseMax - w.body.Len(); room > 0 {
		w.body.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Flush lets the gateway's proxy flush as it does to a client.
func (w *bufferedResponse) Flush() {}
