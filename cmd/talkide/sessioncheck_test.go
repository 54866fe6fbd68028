package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/store"
)

// This file holds the checks the kill -9 and two-worker tests apply to a
// session volume.

// transcriptBlock and transcriptMessage are the Messages API wire shape the
// native harness writes (a copy of its unexported types).
type transcriptBlock struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	ID        string `json:"id,omitempty"`
	ToolUseID string `json:"tool_use_id,omitempty"`
}

type transcriptMessage struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

// validateTranscript checks what the Messages API requires of a
// conversation, after consecutive user messages are merged as the native
// harness merges them before sending: roles alternate starting with user;
// every tool_use is answered by exactly one tool_result at the start of the
// next message; every tool_result answers a tool_use of the message right
// before it; no message and no text block is empty. With openEnd, the last
// message may be an assistant message whose tool calls are unanswered: a
// turn cut off by a crash, which the harness answers (and appends) before
// its next model call. This is the validator of internal/harness/native's
// transcript_test.go, returning an error instead of failing a test.
func validateTranscript(recs []json.RawMessage, openEnd bool) error {
	var msgs []transcriptMessage
	for i, r := range recs {
		var m transcriptMessage
		if err := json.Unmarshal(r, &m); err != nil {
			return fmt.Errorf("record %d %s: %w", i, r, err)
		}
		if n := len(msgs); n > 0 && msgs[n-1].Role == "user" && m.Role == "user" {
			msgs[n-1].Content = append(msgs[n-1].Content, m.Content...)
			continue
		}
		msgs = append(msgs, m)
	}
	var pending map[string]bool // tool_use ids of the previous message
	for i, m := range msgs {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if m.Role != want {
			return fmt.Errorf("message %d has role %q, want %q (roles alternate, starting with user)", i, m.Role, want)
		}
		if len(m.Content) == 0 {
			return fmt.Errorf("message %d has no content", i)
		}
		answered := map[string]bool{}
		seenOther := false
		next := map[string]bool{}
		for _, raw := range m.Content {
			var b transcriptBlock
			if err := json.Unmarshal(raw, &b); err != nil {
				return fmt.Errorf("message %d: block %s: %w", i, raw, err)
			}
			switch b.Type {
			case "text":
				if strings.TrimSpace(b.Text) == "" {
					return fmt.Errorf("message %d has an empty text block (the API rejects it)", i)
				}
				seenOther = true
			case "tool_result":
				switch {
				case m.Role != "user":
					return fmt.Errorf("message %d: tool_result in an %s message", i, m.Role)
				case !pending[b.ToolUseID]:
					return fmt.Errorf("message %d: tool_result %q answers no tool_use of the previous message", i, b.ToolUseID)
				case answered[b.ToolUseID]:
					return fmt.Errorf("message %d: tool_use %q answered twice", i, b.ToolUseID)
				case seenOther:
					return fmt.Errorf("message %d: tool_result %q comes after other content", i, b.ToolUseID)
				}
				answered[b.ToolUseID] = true
			case "tool_use":
				next[b.ID] = true
				seenOther = true
			default:
				seenOther = true
			}
		}
		for id := range pending {
			if !answered[id] {
				return fmt.Errorf("message %d does not answer tool_use %q of the message before it", i, id)
			}
		}
		pending = next
	}
	if len(pending) > 0 && !openEnd {
		return fmt.Errorf("the last message leaves tool_use calls unanswered: %v", pending)
	}
	return nil
}

func TestValidateTranscript(t *testing.T) {
	user := `{"role":"user","content":[{"type":"text","text":"hi"}]}`
	use := `{"role":"assistant","content":[{"type":"text","text":"running"},{"type":"tool_use","id":"A","name":"Bash","input":{}}]}`
	result := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"A","content":"ok"}]}`
	answer := `{"role":"assistant","content":[{"type":"text","text":"done"}]}`
	tests := map[string]struct {
		recs    []string
		openEnd bool
		want    string // substring of the error; empty: valid
	}{
		"tool round trip":                {recs: []string{user, use, result, answer}},
		"user runs merge":                {recs: []string{user, user, answer}},
		"results merge with later text":  {recs: []string{user, use, result, user, answer}},
		"open end allowed after a crash": {recs: []string{user, use}, openEnd: true},
		"open end":                       {recs: []string{user, use}, want: "unanswered"},
		"starts with assistant":          {recs: []string{answer}, want: `role "assistant", want "user"`},
		"two assistants":                 {recs: []string{user, answer, answer}, want: "roles alternate"},
		"unanswered mid-file":            {recs: []string{user, use, user, answer}, openEnd: true, want: `does not answer tool_use "A"`},
		"orphan result":                  {recs: []string{user, answer, result}, want: "answers no tool_use"},
		"result after text":              {recs: []string{user, use, `{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"A"}]}`}, want: "after other content"},
		"empty text":                     {recs: []string{`{"role":"user","content":[{"type":"text","text":" "}]}`}, want: "empty text block"},
		"empty message":                  {recs: []string{`{"role":"user","content":[]}`}, want: "no content"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var recs []json.RawMessage
			for _, r := range tc.recs {
				recs = append(recs, json.RawMessage(r))
			}
			err := validateTranscript(recs, tc.openEnd)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid transcript refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// sessionLog is a session as the checks read it: validated, with its
// events and transcript.
type sessionLog struct {
	v          sessionstore.Validation
	events     []contract.Event
	raw        map[int64][]byte // event JSON as a stream sends it, by seq
	transcript []json.RawMessage
	reports    []contract.Report
	pending    int // reports after the outbox cursor
}

// readSession validates a session directory and reads it read-only.
func readSession(projects, id string) (*sessionLog, error) {
	v, err := sessionstore.Validate(filepath.Join(projects, id))
	if err != nil {
		return nil, err
	}
	st, err := sessionstore.New(projects, nil)
	if err != nil {
		return nil, err
	}
	s, err := st.Inspect(id)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	l := &sessionLog{v: v, raw: map[int64][]byte{}}
	if err := s.ReadEvents(0, func(ev contract.Event) error {
		b, err := json.Marshal(ev)
		l.events = append(l.events, ev)
		l.raw[ev.Seq] = b
		return err
	}); err != nil {
		return nil, err
	}
	if l.transcript, err = s.Transcript(); err != nil {
		return nil, err
	}
	if l.reports, err = s.AllReports(); err != nil {
		return nil, err
	}
	p, err := s.PendingReports()
	l.pending = len(p)
	return l, err
}

// turns returns the turns in the order they started and, for each, its
// terminal event (nil while it is open). Validate has checked that turns
// never overlap.
func (l *sessionLog) turns() (order []string, end map[string]*contract.Event) {
	end = map[string]*contract.Event{}
	for i, ev := range l.events {
		switch {
		case ev.Kind == contract.KindTurnStarted:
			order = append(order, ev.TurnID)
			end[ev.TurnID] = nil
		case contract.Terminal(ev.Kind):
			end[ev.TurnID] = &l.events[i]
		}
	}
	return order, end
}

// buildBinary builds talkide once per test into dir, with the race detector
// when the tests run with it.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "talkide")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// checkReports checks that every report in the conversations' outboxes is
// in the control-plane's store exactly once, the same, and nothing else.
func checkReports(t *testing.T, st store.Store, projects string, convs []string) {
	t.Helper()
	ctx := context.Background()
	total := 0
	for _, id := range convs {
		l, err := readSession(projects, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if l.pending != 0 {
			t.Errorf("%s: %d reports not acknowledged", id, l.pending)
		}
		want := map[string]contract.Report{}
		for _, r := range l.reports {
			if prev, dup := want[r.IdempotencyKey]; dup {
				t.Errorf("%s: idempotency key %s is used by two reports; the second is lost as a duplicate:\n%+v\n%+v", id, r.IdempotencyKey, prev, r)
			}
			r.Time = r.Time.Truncate(time.Millisecond)
			if r.Kind == contract.ReportTurnEnded {
				r.Reply = nil // the control-plane indexes the reply and stores the report without it
			}
			want[r.IdempotencyKey] = r
		}
		stored, err := st.ListReports(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]contract.Report{}
		for _, sr := range stored {
			if _, dup := got[sr.Report.IdempotencyKey]; dup {
				t.Errorf("%s: report %s stored twice", id, sr.Report.IdempotencyKey)
			}
			got[sr.Report.IdempotencyKey] = sr.Report
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: reports in the outbox vs. in the store (-outbox +store):\n%s", id, diff)
		}
		total += len(want)
	}
	t.Logf("%d reports, each stored once", total)
}
