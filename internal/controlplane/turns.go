package controlplane

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// What each turn cost, for the turn's footer in the browser. The money is
// the ledger's: what the gateway recorded of each model call and charged
// at the price table's rates when it settled, so that the browser shows
// what the budget counted and never needs a price.
//
// A call is not labelled with its turn on its way through the gateway, so
// calls are given to turns by time: turns of one conversation run one at a
// time, and a call belongs to the turn whose span (turn.started to its
// terminal event, as the worker wrote them) holds the time the gateway
// started it. A call outside every span, which the worker's and the
// control-plane's clocks disagreeing by more than the gap between two
// turns could make, goes to the nearest turn rather than nowhere.

// A conversation's title call (titles.go) is made as its first turn
// runs and falls in that turn's span: its cost is part of the turn's
// (what the turn cost the user, as the budget counts it), and TitleCalls
// and TitleCostUSD say how much of it named the conversation; Calls and
// the token counts are the agent's own calls alone, comparable with
// finish.model_calls. A ledger entry is a title call when its usage record
// says so (the same id), which the gateway writes a moment after the call.

// TurnUsage is what one turn's model calls used and cost.
type TurnUsage struct {
	TurnID string `json:"turn_id"`
	// Calls counts the agent's model calls the ledger holds for the turn;
	// a call settles just after it ends, so right after the turn it may
	// lag finish.model_calls by the last one.
	Calls             int64  `json:"calls"`
	InputTokens       int64  `json:"input_tokens"`
	OutputTokens      int64  `json:"output_tokens"`
	CacheWriteTokens  int64  `json:"cache_write_tokens"`
	CacheReadTokens   int64  `json:"cache_read_tokens"`
	WebSearchRequests int64  `json:"web_search_requests,omitempty"`
	CostUSD           string `json:"cost_usd"` // exact decimal dollars
	Estimated         bool   `json:"estimated,omitempty"`
	Failed            int64  `json:"failed,omitempty"` // calls the upstream refused or never answered
	// TitleCalls counts the calls that named the conversation, and
	// TitleCostUSD is their part of CostUSD.
	TitleCalls   int64  `json:"title_calls,omitempty"`
	TitleCostUSD string `json:"title_cost_usd,omitempty"`
	cost, title  budget.Money
}

// turnSpan is one turn's span in the log.
type turnSpan struct {
	id         string
	start, end time.Time
	ended      bool
}

// turnSpans returns the turns of a log in order, each from its
// turn.started to its terminal event (open while it runs).
func turnSpans(evs []logEvent) []turnSpan {
	var spans []turnSpan
	at := map[string]int{}
	for _, ev := range evs {
		switch {
		case ev.kind == contract.KindTurnStarted && ev.turnID != "":
			if _, ok := at[ev.turnID]; !ok {
				at[ev.turnID] = len(spans)
				spans = append(spans, turnSpan{id: ev.turnID, start: ev.time})
			}
		case contract.Terminal(ev.kind) && ev.turnID != "":
			if i, ok := at[ev.turnID]; ok && !spans[i].ended {
				spans[i].end, spans[i].ended = ev.time, true
			}
		}
	}
	return spans
}

// turnOf returns the index of the span a call started at t belongs to
// (spans in order, not empty): the one that holds t, else the nearest.
func turnOf(spans []turnSpan, t time.Time) int {
	// i: the last span that started at or before t.
	i := sort.Search(len(spans), func(k int) bool { return spans[k].start.After(t) }) - 1
	if i < 0 {
		return 0
	}
	if !spans[i].ended || !t.After(spans[i].end) || i == len(spans)-1 {
		return i
	}
	if spans[i+1].start.Sub(t) < t.Sub(spans[i].end) {
		return i + 1
	}
	return i
}

// costMargin widens the ledger read around the turns asked for: a call
// settles after it started, and the clocks may disagree a little.
const costMargin = time.Minute

// turnUsage returns the usage of the turns named in want (every turn of
// spans when want is nil) from the ledger of conversation conv; nil
// without a budget service, whose ledger it is.
func (s *Server) turnUsage(ctx context.Context, conv string, spans []turnSpan, want map[string]bool) (map[string]*TurnUsage, error) {
	if s.cfg.Budget == nil || len(spans) == 0 {
		return nil, nil
	}
	out := map[string]*TurnUsage{}
	var from time.Time
	for _, sp := range spans {
		if want != nil && !want[sp.id] {
			continue
		}
		out[sp.id] = &TurnUsage{TurnID: sp.id}
		if from.IsZero() || sp.start.Before(from) {
			from = sp.start
		}
	}
	if len(out) == 0 {
		return out, nil
	}
	// A call settles after it ends, and a long call of the last turn may
	// settle well after the turn's terminal event was written; the read
	// ends at now, not at the turn.
	es, err := s.cfg.Budget.Ledger(ctx, budget.LedgerQuery{Conversation: conv, From: from.Add(-costMargin)})
	if err != nil {
		return nil, err
	}
	titles, err := s.titleCalls(ctx, conv)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		u := out[spans[turnOf(spans, e.StartedAt)].id]
		if u == nil {
			continue
		}
		if titles[e.ID] {
			u.TitleCalls++
			u.title += e.Cost
			u.cost += e.Cost
			continue
		}
		u.Calls++
		u.InputTokens += e.Usage.InputTokens
		u.OutputTokens += e.Usage.OutputTokens
		u.CacheWriteTokens += e.Usage.CacheWrite5mTokens + e.Usage.CacheWrite1hTokens
		u.CacheReadTokens += e.Usage.CacheReadTokens
		u.WebSearchRequests += e.Usage.WebSearchRequests
		u.cost += e.Cost
		u.Estimated = u.Estimated || e.Estimated
		if e.Status != http.StatusOK {
			u.Failed++
		}
	}
	for _, u := range out {
		u.CostUSD = usd(u.cost)
		if u.TitleCalls > 0 {
			u.TitleCostUSD = usd(u.title)
		}
	}
	return out, nil
}

// titleCalls returns the ids of conversation conv's title calls.
func (s *Server) titleCalls(ctx context.Context, conv string) (map[string]bool, error) {
	us, err := s.cfg.Store.ListUsage(ctx, conv)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, u := range us {
		if u.Purpose == store.PurposeTitle {
			ids[u.ID] = true
		}
	}
	return ids, nil
}

// handleTurnUsage is GET /api/conversations/{id}/turns/{turn}/usage: what
// one turn of a conversation the caller may see used and cost. It reads
// the log for the turns' spans, as a history page does.
func (s *Server) handleTurnUsage(w http.ResponseWriter, r *http.Request) error {
	turn := r.PathValue("turn")
	if err := httpapi.ID("turn id", turn); err != nil {
		return err
	}
	if len(r.URL.RawQuery) > 0 {
		return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "this endpoint takes no query parameters")
	}
	if s.cfg.Budget == nil {
		return httpapi.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "this control-plane keeps no ledger: its budget service is not configured")
	}
	return s.withLog(r, func(ctx context.Context, c store.Conversation, wc *workerClient, st contract.SessionState) error {
		var evs []logEvent
		if st.LastSeq > 0 {
			var err error
			if evs, err = s.readLog(ctx, wc, c.ID, 0, func(ev logEvent) bool { return ev.seq >= st.LastSeq }); err != nil {
				return err
			}
		}
		us, err := s.turnUsage(ctx, c.ID, turnSpans(evs), map[string]bool{turn: true})
		if err != nil {
			return err
		}
		u := us[turn]
		if u == nil {
			return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "conversation %s has no turn %s", c.ID, turn)
		}
		httpapi.WriteJSON(w, http.StatusOK, u)
		return nil
	})
}

// handleMyBudget is GET /api/me/budget: the calling user's limits and
// where they stand, in the operator API's shape; nobody else's.
func (s *Server) handleMyBudget(w http.ResponseWriter, r *http.Request) error {
	if len(r.URL.RawQuery) > 0 {
		return httpapi.Errorf(http.StatusBadRequest, contract.CodeBadRequest, "this endpoint takes no query parameters")
	}
	if s.cfg.Budget == nil {
		return httpapi.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "this control-plane keeps no budgets: its budget service is not configured")
	}
	sub := budget.User(userOf(r))
	sts, err := s.cfg.Budget.Status(r.Context(), sub)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, statusJSON(sub, sts, s.cfg.Now().UTC()))
	return nil
}
