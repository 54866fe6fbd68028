package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/store"
)

// History page sizes: what GET /api/conversations/{id}/events answers
// without ?limit=, and the most it answers with one.
const (
	DefaultHistoryLimit = 200
	MaxHistoryLimit     = 1000
)

// historyTimeout bounds how long reading a conversation's log from its
// worker may take.
const historyTimeout = 30 * time.Second

// HistoryPage is the answer of GET /api/conversations/{id}/events: the
// compacted events of one page, oldest first, as the worker wrote them.
type HistoryPage struct {
	Events []json.RawMessage `json:"events"`
	// FirstSeq is the sequence number of the page's first event (0 for an
	// empty page): the next older page is ?before=FirstSeq.
	FirstSeq int64 `json:"first_seq"`
	// LastSeq is the newest event of the log when the page was read; a
	// stream opened with Last-Event-ID: LastSeq misses nothing.
	LastSeq int64 `json:"last_seq"`
	// HasMore says whether older events than the page exist.
	HasMore bool `json:"has_more"`
	// TurnUsage holds, by turn id, what each turn that ends on the page
	// used and cost (turns.go); absent without a budget service.
	TurnUsage map[string]*TurnUsage `json:"turn_usage,omitempty"`
}

// handleHistory answers a page of a conversation's log, compacted: in a
// turn that has ended, the text deltas that an assistant.message repeats
// and the output chunks of tools whose tool.finished carries the output
// are left out, so a weeks-long conversation opens without replaying every
// delta. Nothing else is dropped or changed: every event keeps its
// sequence number, and the events of a running turn come whole.
//
// A page reads only its own stretch of the log, newest first, in growing
// chunks (the worker's stream starts at any sequence number at the cost of
// one index lookup), so opening or scrolling a conversation of 50,000
// events costs what its page spans, not the whole log.
func (s *Server) handleHistory(w http.ResponseWriter, r *http.Request) error {
	before, limit, err := historyQuery(r)
	if err != nil {
		return err
	}
	return s.withLog(r, func(ctx context.Context, c store.Conversation, wc *workerClient, st contract.SessionState) error {
		return s.historyPage(ctx, w, c, wc, st, before, limit)
	})
}

// withLog runs f on the conversation the request names, with where its log
// stands on its worker: what a history page and a turn's usage both read
// from, within historyTimeout.
func (s *Server) withLog(r *http.Request, f func(context.Context, store.Conversation, *workerClient, contract.SessionState) error) error {
	c, wc, err := s.conversationWorker(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), historyTimeout)
	defer cancel()
	st, err := s.sessionState(ctx, wc, c.ID)
	if err != nil {
		return workerFailure(err)
	}
	return f(ctx, c, wc, st)
}

func (s *Server) historyPage(ctx context.Context, w http.ResponseWriter, c store.Conversation, wc *workerClient, st contract.SessionState, before int64, limit int) error {
	page := HistoryPage{Events: []json.RawMessage{}, LastSeq: st.LastSeq}
	hi := st.LastSeq
	if before > 0 {
		hi = min(hi, before-1)
	}
	if hi < 1 {
		httpapi.WriteJSON(w, http.StatusOK, page)
		return nil
	}
	running := ""
	if st.Status == contract.StatusRunning {
		running = st.RunningTurnID
	}
	evs, more, err := s.readPage(ctx, wc, c.ID, st.LastSeq, hi, limit, running)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		page.Events = append(page.Events, ev.raw)
	}
	if len(evs) > 0 {
		page.FirstSeq = evs[0].seq
	}
	page.HasMore = more
	ending := map[string]bool{}
	for _, ev := range evs {
		if contract.Terminal(ev.kind) && ev.turnID != "" {
			ending[ev.turnID] = true
		}
	}
	if len(ending) > 0 {
		spans := turnSpans(evs)
		if evs[len(evs)-1].seq < st.LastSeq {
			// Newer turns are not on this page: a call that started after
			// its last event belongs to one of them, not to the page's
			// last turn (an unnamed span takes it, and it is not counted).
			spans = append(spans, turnSpan{start: evs[len(evs)-1].time})
		}
		if page.TurnUsage, err = s.turnUsage(ctx, c.ID, spans, ending); err != nil {
			return err
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, page)
	return nil
}

// historyQuery reads ?before= (a sequence number, 1 or more; absent: the
// newest page) and ?limit= (1 to MaxHistoryLimit). Any other parameter is
// refused, as a misspelt field is in a body.
func historyQuery(r *http.Request) (before int64, limit int, err error) {
	q := r.URL.Query()
	for k := range q {
		if k != "before" && k != "limit" {
			return 0, 0, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "unknown query parameter %q (want before, limit)", k)
		}
		if len(q[k]) > 1 {
			return 0, 0, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "query parameter %q is given %d times", k, len(q[k]))
		}
	}
	limit = DefaultHistoryLimit
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxHistoryLimit {
			return 0, 0, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "limit must be an integer from 1 to %d", MaxHistoryLimit)
		}
		limit = n
	}
	if v := q.Get("before"); v != "" || q.Has("before") {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return 0, 0, httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "before must be a sequence number of 1 or more")
		}
		before = n
	}
	return before, limit, nil
}

// logEvent is one event of the log: what folding needs, and its bytes.
type logEvent struct {
	seq    int64
	kind   string
	turnID string
	toolID string
	time   time.Time
	parent string // parent_tool_use_id: which agent of the turn
	raw    json.RawMessage
}

// replyKey names one agent's replies in one turn: the main agent's
// (parent "") or a sub-agent's, whose deltas only its own messages repeat.
type replyKey struct{ turn, parent string }

// folder decides, walking the log from the newest event back, which events
// a page leaves out. It remembers, across the chunks of one page, which
// agents' messages and which tools' tool.finished come later.
type folder struct {
	running      string // the turn still running: nothing of it is folded
	laterMessage map[replyKey]bool
	laterFinish  map[string]bool
}

func newFolder(running string) *folder {
	return &folder{running: running, laterMessage: map[replyKey]bool{}, laterFinish: map[string]bool{}}
}

// keep says whether ev stays; events must come newest first.
func (f *folder) keep(ev logEvent) bool {
	ended := ev.turnID != "" && ev.turnID != f.running
	switch ev.kind {
	case contract.KindMessage:
		f.laterMessage[replyKey{ev.turnID, ev.parent}] = true
	case contract.KindToolFinished:
		f.laterFinish[ev.toolID] = true
	case contract.KindTextDelta:
		return !(ended && f.laterMessage[replyKey{ev.turnID, ev.parent}])
	case contract.KindToolOutput:
		return !(ended && ev.toolID != "" && f.laterFinish[ev.toolID])
	}
	return true
}

// pending lists what the newest events of a chunk wait for beyond it: the
// messages that would fold deltas the chunk ends with, the tool.finished
// events that would fold its tools' output.
func (f *folder) pending(chunk []logEvent) (msgs map[replyKey]bool, tools map[string]bool) {
	msgs, tools = map[replyKey]bool{}, map[string]bool{}
	for _, ev := range chunk {
		if ev.turnID == "" || ev.turnID == f.running {
			continue
		}
		switch ev.kind {
		case contract.KindTextDelta:
			msgs[replyKey{ev.turnID, ev.parent}] = true
		case contract.KindMessage:
			delete(msgs, replyKey{ev.turnID, ev.parent})
		case contract.KindToolOutput:
			if ev.toolID != "" {
				tools[ev.toolID] = true
			}
		case contract.KindToolFinished:
			delete(tools, ev.toolID)
		}
	}
	return msgs, tools
}

// historyChunk is the first stretch of the log a page reads, in events per
// event of the page; the next stretches double it. Compaction keeps about
// one event in five of a turn that streamed text and tool output, so most
// pages take one or two stretches.
const historyChunk = 4

// readPage returns the newest limit events of the compacted log at or
// before hi (oldest first), and whether older ones exist. last is the log's
// newest event, running the turn still running.
func (s *Server) readPage(ctx context.Context, wc *workerClient, id string, last, hi int64, limit int, running string) ([]logEvent, bool, error) {
	f := newFolder(running)
	var kept []logEvent // newest first
	size := int64(historyChunk*limit + 64)
	for first := true; hi >= 1 && len(kept) <= limit; first = false {
		lo := max(1, hi-size+1)
		chunk, err := s.readLog(ctx, wc, id, lo-1, func(ev logEvent) bool { return ev.seq >= hi })
		if err != nil {
			return nil, false, err
		}
		for len(chunk) > 0 && chunk[len(chunk)-1].seq > hi {
			chunk = chunk[:len(chunk)-1] // past a gap in the log
		}
		if first && hi < last {
			// The chunk may end inside a reply or a tool call whose
			// message or tool.finished comes after it: read on until
			// they (or the turn's end) came.
			msgs, tools := f.pending(chunk)
			if len(msgs)+len(tools) > 0 {
				_, err := s.readLog(ctx, wc, id, hi, func(ev logEvent) bool {
					switch ev.kind {
					case contract.KindMessage:
						if k := (replyKey{ev.turnID, ev.parent}); msgs[k] {
							delete(msgs, k)
							f.laterMessage[k] = true
						}
					case contract.KindToolFinished:
						if tools[ev.toolID] {
							delete(tools, ev.toolID)
							f.laterFinish[ev.toolID] = true
						}
					}
					return len(msgs)+len(tools) == 0 || contract.Terminal(ev.kind) || ev.seq >= last
				})
				if err != nil {
					return nil, false, err
				}
			}
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if f.keep(chunk[i]) {
				kept = append(kept, chunk[i])
			}
		}
		hi, size = lo-1, size*2
	}
	more := len(kept) > limit
	kept = kept[:min(len(kept), limit)]
	slices.Reverse(kept)
	return kept, more, nil
}

// readLog streams a conversation's log from its worker from after+1 on,
// until done says an event is the last one wanted.
func (s *Server) readLog(ctx context.Context, wc *workerClient, id string, after int64, done func(logEvent) bool) ([]logEvent, error) {
	var evs []logEvent
	errDone := errors.New("read far enough")
	err := wc.streamEvents(ctx, id, after, func(ev sse.Event) error {
		seq, err := strconv.ParseInt(ev.ID, 10, 64)
		if err != nil || seq <= after || len(evs) > 0 && seq <= evs[len(evs)-1].seq {
			return nil // not an event of the log, or a repeat
		}
		var head struct {
			Seq    int64     `json:"seq"`
			Kind   string    `json:"kind"`
			TurnID string    `json:"turn_id"`
			Time   time.Time `json:"time"`
			Parent string    `json:"parent_tool_use_id"`
			Tool   *struct {
				ID string `json:"id"`
			} `json:"tool"`
		}
		if err := json.Unmarshal(ev.Data, &head); err != nil || head.Seq != seq {
			return fmt.Errorf("the worker sent event %d malformed", seq)
		}
		le := logEvent{seq: seq, kind: head.Kind, turnID: head.TurnID, time: head.Time, parent: head.Parent, raw: json.RawMessage(ev.Data)}
		check := contract.Event{Kind: head.Kind, TurnID: head.TurnID, ParentToolUseID: head.Parent}
		if head.Tool != nil {
			le.toolID = head.Tool.ID
			check.Tool = &contract.ToolEvent{ID: head.Tool.ID}
		}
		if check.ValidateParent() != nil {
			// Folded as the main agent's; the event itself goes out as
			// the worker wrote it.
			le.parent = ""
		}
		evs = append(evs, le)
		if done(le) {
			return errDone
		}
		return nil
	})
	if errors.Is(err, errDone) {
		return evs, nil
	}
	if ctx.Err() != nil {
		return nil, httpapi.Errorf(http.StatusGatewayTimeout, contract.CodeUnavailable, "reading the conversation's log from its worker took too long; try again")
	}
	return nil, workerFailure(err)
}

// compactLog folds a whole log (oldest first) as the pages do; the ended
// turns are those with a terminal event in it.
func compactLog(evs []logEvent) []logEvent {
	ended := map[string]bool{}
	for _, ev := range evs {
		if contract.Terminal(ev.kind) && ev.turnID != "" {
			ended[ev.turnID] = true
		}
	}
	f := newFolder("")
	keep := make([]bool, len(evs))
	for i := len(evs) - 1; i >= 0; i-- {
		keep[i] = f.keep(evs[i]) || !ended[evs[i].turnID]
	}
	out := evs[:0:0]
	for i, ev := range evs {
		if keep[i] {
			out = append(out, ev)
		}
	}
	return out
}
