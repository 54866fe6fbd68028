package claudecode

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/anthropicsim"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/sandbox/sandboxtest"
)

// session is one conversation's directories and outlets, kept across turns.
type session struct {
	conv       string
	dir, ws    string
	transcript *harness.MemTranscript
	jail       *sandbox.Jail

	mu      sync.Mutex
	events  []contract.Event  // guarded by mu
	reports []contract.Report // guarded by mu
	// watch, when set, sees every event as it is emitted.
	watch func(contract.Event)
}

func newSession(t *testing.T, conv string) *session {
	t.Helper()
	ws := t.TempDir()
	jail := sandboxtest.HostJail(t, ws)
	transcripts, _ := filepath.Abs(transcriptDir)
	jail.Writable = append(jail.Writable, fakeRoot)
	jail.ReadOnly = append(jail.ReadOnly, transcripts)
	return &session{conv: conv, dir: t.TempDir(), ws: ws, transcript: &harness.MemTranscript{}, jail: jail}
}

func (s *session) turn(text string) *harness.Turn {
	return &harness.Turn{
		ConversationID: s.conv, TurnID: "t_" + contract.NewID(""), UserID: "u1", Text: text,
		SessionDir: s.dir, Workspace: s.ws, Transcript: s.transcript, Jail: s.jail,
		Emit: func(ev contract.Event) {
			s.mu.Lock()
			s.events = append(s.events, ev)
			w := s.watch
			s.mu.Unlock()
			if w != nil {
				w(ev)
			}
		},
		Report: func(r contract.Report) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.reports = append(s.reports, r)
		},
	}
}

// take returns the events and reports so far and forgets them.
func (s *session) take() ([]contract.Event, []contract.Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev, rep := s.events, s.reports
	s.events, s.reports = nil, nil
	return ev, rep
}

func eventKinds(evs []contract.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Kind != contract.KindTextDelta {
			out = append(out, e.Kind)
		}
	}
	return out
}

// lastText is the text of the last assistant.message.
func lastText(evs []contract.Event) string {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == contract.KindMessage {
			return evs[i].Text
		}
	}
	return ""
}

// simulator serves the model simulator under /<conversation>/, the way the
// LocalGatewayProxy serves it to the CLI.
type simulator struct {
	srv *httptest.Server
	sim *anthropicsim.Simulator
	key string
}

func newSimulator(t testing.TB) *simulator {
	t.Helper()
	s := &simulator{key: "tlp_test-capability"}
	s.sim = anthropicsim.New(s.key, nil)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		r.URL.Path = "/" + rest
		r.URL.RawPath = ""
		s.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// proxy is the simulator as the CLI's LocalGatewayProxy.
func (s *simulator) proxy() Proxy {
	return Proxy{
		BaseURLFor: func(conv string) string { return s.srv.URL + "/" + conv },
		Capability: func(string) string { return s.key },
	}
}

func (s *simulator) options() *Options { return &Options{Model: "claude-sonnet-5-5"} }

// runTurn runs a turn with a deadline.
func runTurn(t *testing.T, h *Harness, s *session, text string) (harness.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return h.RunTurn(ctx, s.turn(text))
}

// mustTurn runs a turn of s with text; an error fails the test.
func mustTurn(t *testing.T, h *Harness, s *session, text string) harness.Result {
	t.Helper()
	res, err := runTurn(t, h, s, text)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
