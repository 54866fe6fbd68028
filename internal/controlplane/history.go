package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/sse"
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
func (s *Server) handleHistory(w http.ResponseWriter, r *http.Request) error {
	before, limit, err := historyQuery(r)
	if err != nil {
		return err
	}
	c, wc, err := s.conversationWorker(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), historyTimeout)
	defer cancel()
	var st contract.SessionState
	if _, err := wc.do(ctx, http.MethodGet, contract.SessionPath, c.ID, nil, &st); err != nil {
		return workerFailure(err)
	}
	s.activity.state(st)
	page := HistoryPage{Events: []json.RawMessage{}, LastSeq: st.LastSeq}
	if st.LastSeq == 0 {
		httpapi.WriteJSON(w, http.StatusOK, page)
		return nil
	}
	evs, err := s.readLog(ctx, wc, c.ID, st.LastSeq)
	if err != nil {
		return err
	}
	compact := compactLog(evs)
	end := len(compact)
	if before > 0 {
		end = 0
		for end < len(compact) && compact[end].seq < before {
			end++
		}
	}
	start := max(0, end-limit)
	for _, ev := range compact[start:end] {
		page.Events = append(page.Events, ev.raw)
	}
	if start < end {
		page.FirstSeq = compact[start].seq
	}
	page.HasMore = start > 0
	ending := map[string]bool{}
	for _, ev := range compact[start:end] {
		if contract.Terminal(ev.kind) && ev.turnID != "" {
			ending[ev.turnID] = true
		}
	}
	if len(ending) > 0 {
		if page.TurnUsage, err = s.turnUsage(ctx, c.ID, turnSpans(evs), ending); err != nil {
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
	raw    json.RawMessage
}

// readLog reads a conversation's log from its worker, events 1 to last.
func (s *Server) readLog(ctx context.Context, wc *workerClient, id string, last int64) ([]logEvent, error) {
	evs := make([]logEvent, 0, min(last, 1<<16))
	errDone := errors.New("read to the end")
	err := wc.streamEvents(ctx, id, 0, func(ev sse.Event) error {
		seq, err := strconv.ParseInt(ev.ID, 10, 64)
		if err != nil || len(evs) > 0 && seq <= evs[len(evs)-1].seq {
			return nil // not an event of the log, or a repeat
		}
		var head struct {
			Seq    int64     `json:"seq"`
			Kind   string    `json:"kind"`
			TurnID string    `json:"turn_id"`
			Time   time.Time `json:"time"`
			Tool   *struct {
				ID string `json:"id"`
			} `json:"tool"`
		}
		if err := json.Unmarshal(ev.Data, &head); err != nil || head.Seq != seq {
			return fmt.Errorf("the worker sent event %d malformed", seq)
		}
		le := logEvent{seq: seq, kind: head.Kind, turnID: head.TurnID, time: head.Time, raw: json.RawMessage(ev.Data)}
		if head.Tool != nil {
			le.toolID = head.Tool.ID
		}
		evs = append(evs, le)
		if seq >= last {
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

// compactLog drops, in turns that have ended, the text.delta events an
// assistant.message of the same turn repeats later, and the tool.output
// events of tools whose tool.finished follows. Deltas of a turn that ended
// without the message (interrupted mid-reply) stay: they are all there is
// of that text.
func compactLog(evs []logEvent) []logEvent {
	ended := map[string]bool{}
	for _, ev := range evs {
		if contract.Terminal(ev.kind) && ev.turnID != "" {
			ended[ev.turnID] = true
		}
	}
	keep := make([]bool, len(evs))
	laterMessage := map[string]bool{} // turn → an assistant.message follows
	laterFinish := map[string]bool{}  // tool → its tool.finished follows
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		keep[i] = true
		switch ev.kind {
		case contract.KindMessage:
			laterMessage[ev.turnID] = true
		case contract.KindToolFinished:
			laterFinish[ev.toolID] = true
		case contract.KindTextDelta:
			keep[i] = !(ended[ev.turnID] && laterMessage[ev.turnID])
		case contract.KindToolOutput:
			keep[i] = !(ended[ev.turnID] && ev.toolID != "" && laterFinish[ev.toolID])
		}
	}
	out := evs[:0:0]
	for i, ev := range evs {
		if keep[i] {
			out = append(out, ev)
		}
	}
	return out
}
