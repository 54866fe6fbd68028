package controlplane_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/sse"
)

// historyLog is a conversation's log as a worker holds it: long turns of
// streamed text, tool output and a sub-agent, the last turn running or
// not. Its stream starts right after ?after=, as the worker's does (its
// index makes that cheap).
type historyLog struct {
	events  []contract.Event
	raw     [][]byte
	running string // the turn still running, if any
}

// newHistoryLog writes about n events in turns like a real conversation's:
// a reply streamed in deltas, a Bash call with output chunks, a Task call
// whose sub-agent streams and runs a tool, a last reply. With running the
// last turn has no end yet; every fifth turn is interrupted mid-reply.
func newHistoryLog(n int, running bool) *historyLog {
	l := &historyLog{}
	add := func(ev contract.Event) {
		ev.Seq = int64(len(l.events) + 1)
		ev.ConversationID = "demo"
		l.events = append(l.events, ev)
	}
	add(contract.Event{Kind: contract.KindSessionCreated, Session: &contract.SessionEvent{Harness: "native"}})
	for t := 0; len(l.events) < n; t++ {
		turn := fmt.Sprintf("t_%d", t)
		add(contract.Event{Kind: contract.KindUserMessage, TurnID: turn, ClientMessageID: "m" + strconv.Itoa(t), Text: "do it"})
		add(contract.Event{Kind: contract.KindTurnStarted, TurnID: turn})
		reply := func(parent string, deltas int) {
			for range deltas {
				add(contract.Event{Kind: contract.KindTextDelta, TurnID: turn, ParentToolUseID: parent, Text: "some words "})
			}
			add(contract.Event{Kind: contract.KindMessage, TurnID: turn, ParentToolUseID: parent, Text: "all the words"})
			add(contract.Event{Kind: contract.KindUsage, TurnID: turn, ParentToolUseID: parent, Usage: &contract.Usage{Model: "m", InputTokens: 10, OutputTokens: 20}})
		}
		tool := func(parent, id, name string, chunks int) {
			add(contract.Event{Kind: contract.KindToolStarted, TurnID: turn, ParentToolUseID: parent, Tool: &contract.ToolEvent{ID: id, Name: name, Input: json.RawMessage(`{"command":"make"}`)}})
			for range chunks {
				add(contract.Event{Kind: contract.KindToolOutput, TurnID: turn, ParentToolUseID: parent, Tool: &contract.ToolEvent{ID: id, Name: name, Output: "a line of output\n"}})
			}
			add(contract.Event{Kind: contract.KindToolFinished, TurnID: turn, ParentToolUseID: parent, Tool: &contract.ToolEvent{ID: id, Name: name, Output: "all the output", DurationMS: 5}})
		}
		reply("", 30)
		tool("", turn+"_bash", "Bash", 8)
		task := turn + "_task"
		add(contract.Event{Kind: contract.KindToolStarted, TurnID: turn, Tool: &contract.ToolEvent{ID: task, Name: "Task", Input: json.RawMessage(`{"prompt":"look"}`)}})
		reply(task, 10)
		tool(task, turn+"_sub", "Read", 2)
		add(contract.Event{Kind: contract.KindToolOutput, TurnID: turn, Tool: &contract.ToolEvent{ID: task, Name: "Task", Output: "⏺ Read"}})
		reply(task, 10)
		add(contract.Event{Kind: contract.KindToolFinished, TurnID: turn, Tool: &contract.ToolEvent{ID: task, Name: "Task", Output: "the report"}})
		if len(l.events) >= n && running {
			l.running = turn
			for range 20 {
				add(contract.Event{Kind: contract.KindTextDelta, TurnID: turn, Text: "still going "})
			}
			break
		}
		if t%5 == 4 {
			for range 12 {
				add(contract.Event{Kind: contract.KindTextDelta, TurnID: turn, Text: "cut "})
			}
			add(contract.Event{Kind: contract.KindTurnFailed, TurnID: turn, Failure: &contract.TurnFailure{Code: contract.FailInterrupted}})
			continue
		}
		reply("", 30)
		add(contract.Event{Kind: contract.KindTurnFinished, TurnID: turn, Finish: &contract.TurnFinish{StopReason: "end_turn"}})
	}
	for _, ev := range l.events {
		b, _ := json.Marshal(ev)
		l.raw = append(l.raw, b)
	}
	return l
}

func (l *historyLog) state(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet || r.URL.Path != "/v1/sessions/demo" {
		return false
	}
	st := contract.SessionState{ConversationID: "demo", Status: contract.StatusIdle, LastSeq: int64(len(l.events)), Harness: "fake"}
	if l.running != "" {
		st.Status, st.RunningTurnID = contract.StatusRunning, l.running
	}
	httpapi.WriteJSON(w, http.StatusOK, st)
	return true
}

func (l *historyLog) serve(w http.ResponseWriter, r *http.Request, _ int) {
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for seq := after + 1; seq <= int64(len(l.events)); seq++ {
		if sse.Write(w, strconv.FormatInt(seq, 10), l.events[seq-1].Kind, l.raw[seq-1]) != nil {
			return
		}
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done() // a live stream: the reader hangs up
}

// compacted is the rule of the history endpoint, written out plainly over
// the whole log: in a turn that has ended, a text.delta is left out when an
// assistant.message of the same turn and the same agent (parent) follows
// it, a tool.output when its tool's tool.finished follows.
func (l *historyLog) compacted() []int64 {
	var out []int64
	for i, ev := range l.events {
		drop := false
		if ev.TurnID != "" && ev.TurnID != l.running {
			for _, later := range l.events[i+1:] {
				if later.TurnID != ev.TurnID {
					continue
				}
				if ev.Kind == contract.KindTextDelta && later.Kind == contract.KindMessage && later.ParentToolUseID == ev.ParentToolUseID ||
					ev.Kind == contract.KindToolOutput && later.Kind == contract.KindToolFinished && later.Tool.ID == ev.Tool.ID {
					drop = true
					break
				}
			}
		}
		if !drop {
			out = append(out, ev.Seq)
		}
	}
	return out
}

func historyHarness(tb testing.TB, l *historyLog) *harness {
	h := newHarness(tb, harnessOptions{worker: fakeOptions{stream: l.serve, command: l.state}})
	h.insertConversation("demo", user, env)
	return h
}

func (h *harness) historyPage(query string) controlplane.HistoryPage {
	h.t.Helper()
	resp, body := h.do(http.MethodGet, "/api/conversations/demo/events"+query, "", nil)
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("GET events%s: %d %s", query, resp.StatusCode, body)
	}
	var p controlplane.HistoryPage
	if err := json.Unmarshal(body, &p); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func pageSeqs(t testing.TB, p controlplane.HistoryPage) []int64 {
	var out []int64
	for _, raw := range p.Events {
		var ev struct {
			Seq int64 `json:"seq"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.Seq)
	}
	return out
}

// TestHistoryPaging: paging from the newest page back to the first, with
// page sizes that cut turns, replies and tool output anywhere, gives every
// event of the compacted log exactly once, in order; and a page costs what
// it spans, not the whole log: the worker streams the page's stretch of the
// log (and, at the page's newest end, the rest of a reply or tool call that
// started in it), never everything.
func TestHistoryPaging(t *testing.T) {
	for _, running := range []bool{false, true} {
		l := newHistoryLog(3000, running)
		want := l.compacted()
		h := historyHarness(t, l)
		for _, limit := range []int{1, 7, 50, 200, 1000} {
			t.Run(fmt.Sprintf("running=%v/limit=%d", running, limit), func(t *testing.T) {
				var got []int64
				query := "?limit=" + strconv.Itoa(limit)
				pages := 0
				nAfters := len(h.worker.Afters())
				for {
					p := h.historyPage(query)
					pages++
					if p.LastSeq != int64(len(l.events)) {
						t.Fatalf("last_seq %d, want %d", p.LastSeq, len(l.events))
					}
					seqs := pageSeqs(t, p)
					if len(seqs) > limit || len(seqs) < limit && p.HasMore {
						t.Fatalf("page %s: %d events with has_more %v", query, len(seqs), p.HasMore)
					}
					if len(seqs) > 0 && p.FirstSeq != seqs[0] {
						t.Fatalf("first_seq %d, first event %d", p.FirstSeq, seqs[0])
					}
					// Where a page reads the log: the worker's stream starts
					// at ?after=, so a page that starts its reads near its
					// own events costs what it spans. The first stretch is
					// 4×limit+64 events and each next one doubles it.
					afters := h.worker.Afters()[nAfters:]
					nAfters += len(afters)
					if len(afters) == 0 || len(afters) > 8 {
						t.Fatalf("page %s: %d worker streams", query, len(afters))
					}
					for _, a := range afters {
						n, _ := strconv.ParseInt(a, 10, 64)
						if len(seqs) > 0 && n < seqs[0]-1-int64(16*limit+256) {
							t.Errorf("page %s (from %d) read the log from %d on", query, seqs[0], n+1)
						}
					}
					got = append(seqs, got...)
					if !p.HasMore {
						break
					}
					query = fmt.Sprintf("?limit=%d&before=%d", limit, p.FirstSeq)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("the pages (%d) hold (-want +got):\n%s", pages, diff)
				}
			})
		}
	}
	// A page before the first event, and before a seq beyond the log.
	l := newHistoryLog(500, false)
	h := historyHarness(t, l)
	if p := h.historyPage("?before=1"); len(p.Events) != 0 || p.HasMore || p.FirstSeq != 0 {
		t.Errorf("before=1: %+v", p)
	}
	want := l.compacted()
	p := h.historyPage("?before=999999&limit=5")
	if diff := cmp.Diff(want[len(want)-5:], pageSeqs(t, p)); diff != "" || !p.HasMore {
		t.Errorf("before beyond the log (-want +got):\n%s (has_more %v)", diff, p.HasMore)
	}
}

// BenchmarkHistoryPage reads one page of 200 events (the UI's page) from
// a conversation of 5,000 and of 50,000 events: the newest page, which
// opening the conversation reads, and one from the middle, which
// scrolling up reaches. It reports how many worker streams a page opened.
func BenchmarkHistoryPage(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		l := newHistoryLog(n, false)
		want := l.compacted()
		h := historyHarness(b, l)
		for _, at := range []string{"newest", "middle"} {
			query := "?limit=200"
			if at == "middle" {
				query += "&before=" + strconv.FormatInt(want[len(want)/2], 10)
			}
			b.Run(fmt.Sprintf("events=%d/%s", n, at), func(b *testing.B) {
				streams := len(h.worker.Afters())
				for b.Loop() {
					if p := h.historyPage(query); len(p.Events) != 200 {
						b.Fatalf("%d events", len(p.Events))
					}
				}
				b.ReportMetric(float64(len(h.worker.Afters())-streams)/float64(b.N), "worker-streams/op")
			})
		}
	}
}
