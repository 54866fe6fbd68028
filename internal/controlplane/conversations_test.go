package controlplane_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/store"
)

type listAnswer struct {
	Conversations []controlplane.ConversationView `json:"conversations"`
}

func (h *harness) list(query string) listAnswer {
	h.t.Helper()
	resp, body := h.do(http.MethodGet, "/api/conversations"+query, "", nil)
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("list%s: %d %s", query, resp.StatusCode, body)
	}
	var l listAnswer
	decodeJSON(h.t, body, &l)
	return l
}

func ids(l listAnswer) []string {
	var out []string
	for _, c := range l.Conversations {
		out = append(out, c.ID)
	}
	return out
}

// TestUpdateConversation: rename and archive round trip through the API;
// the list hides archived conversations unless asked.
func TestUpdateConversation(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.insertConversation("c1", user, env)
	h.clock.Advance(time.Second)
	h.insertConversation("c2", user, env)

	patch := func(body string) controlplane.ConversationView {
		t.Helper()
		before := h.worker.Requests()
		resp, b := h.do(http.MethodPatch, "/api/conversations/c1", body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PATCH %s: %d %s", body, resp.StatusCode, b)
		}
		// The list reads the worker's running sessions; a rename or an
		// archive is the store's alone.
		if n := h.worker.Requests() - before; n != 0 {
			t.Errorf("PATCH %s asked the worker %d times", body, n)
		}
		var v controlplane.ConversationView
		decodeJSON(t, b, &v)
		return v
	}
	if v := patch(`{"title":"  Renamed  "}`); v.Title != "Renamed" || v.ArchivedAt != nil {
		t.Errorf("after rename: %+v", v)
	}
	if got := ids(h.list("")); strings.Join(got, ",") != "c2,c1" {
		t.Errorf("list = %v", got)
	}
	h.clock.Advance(time.Minute)
	archivedAt := h.clock.Now().UTC()
	v := patch(`{"archived":true}`)
	if v.ArchivedAt == nil || !v.ArchivedAt.Equal(archivedAt) || v.Title != "Renamed" {
		t.Errorf("after archive: %+v", v)
	}
	if got := ids(h.list("")); strings.Join(got, ",") != "c2" {
		t.Errorf("list without archived = %v", got)
	}
	if got := ids(h.list("?archived=0")); strings.Join(got, ",") != "c2" {
		t.Errorf("list ?archived=0 = %v", got)
	}
	all := h.list("?archived=1")
	if got := ids(all); strings.Join(got, ",") != "c2,c1" {
		t.Errorf("list ?archived=1 = %v", got)
	}
	if all.Conversations[1].ArchivedAt == nil || all.Conversations[0].ArchivedAt != nil {
		t.Errorf("archived_at in the list: %+v", all.Conversations)
	}
	// Both at once: back in the list under another name.
	if v := patch(`{"archived":false,"title":"Back"}`); v.ArchivedAt != nil || v.Title != "Back" {
		t.Errorf("after unarchive: %+v", v)
	}
	if got := ids(h.list("")); strings.Join(got, ",") != "c2,c1" {
		t.Errorf("list after unarchive = %v", got)
	}
	c, err := h.store.GetConversation(t.Context(), "c1")
	if err != nil || c.Title != "Back" || !c.ArchivedAt.IsZero() {
		t.Errorf("stored %+v, %v", c, err)
	}
}

// TestUpdateConversationBadInput: each refusal says what is wrong and
// changes nothing.
func TestUpdateConversationBadInput(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.insertConversation("c1", user, env)
	h.insertConversation("theirs", otherUser, env)
	tests := map[string]struct {
		path, body string
		status     int
		code       string
	}{
		"empty body":        {"/api/conversations/c1", "", http.StatusBadRequest, contract.CodeBadRequest},
		"nothing to change": {"/api/conversations/c1", `{}`, http.StatusBadRequest, contract.CodeBadRequest},
		"null title only":   {"/api/conversations/c1", `{"title":null}`, http.StatusBadRequest, contract.CodeBadRequest},
		"empty title":       {"/api/conversations/c1", `{"title":"   "}`, http.StatusBadRequest, contract.CodeBadRequest},
		"two lines":         {"/api/conversations/c1", `{"title":"a\nb"}`, http.StatusBadRequest, contract.CodeBadRequest},
		"bidi override":     {"/api/conversations/c1", `{"title":"a\u202eb"}`, http.StatusBadRequest, contract.CodeBadRequest},
		"title too long":    {"/api/conversations/c1", `{"title":"` + strings.Repeat("t", 201) + `"}`, http.StatusBadRequest, contract.CodeBadRequest},
		"title not text":    {"/api/conversations/c1", `{"title":7}`, http.StatusBadRequest, contract.CodeBadRequest},
		"archived a string": {"/api/conversations/c1", `{"archived":"yes"}`, http.StatusBadRequest, contract.CodeBadRequest},
		"unknown field":     {"/api/conversations/c1", `{"titel":"x"}`, http.StatusBadRequest, contract.CodeBadRequest},
		"key twice":         {"/api/conversations/c1", `{"title":"x","title":"y"}`, http.StatusBadRequest, contract.CodeBadRequest},
		"wrong case":        {"/api/conversations/c1", `{"Title":"x"}`, http.StatusBadRequest, contract.CodeBadRequest},
		"trailing data":     {"/api/conversations/c1", `{"title":"x"} {}`, http.StatusBadRequest, contract.CodeBadRequest},
		"not an object":     {"/api/conversations/c1", `["x"]`, http.StatusBadRequest, contract.CodeBadRequest},
		"too large":         {"/api/conversations/c1", `{"title":"` + strings.Repeat("t", 1<<20) + `"}`, http.StatusRequestEntityTooLarge, contract.CodeTooLarge},
		"bad id":            {"/api/conversations/-x", `{"title":"x"}`, http.StatusBadRequest, contract.CodeInvalidID},
		"unknown":           {"/api/conversations/nosuch", `{"title":"x"}`, http.StatusNotFound, contract.CodeNotFound},
		"someone else's":    {"/api/conversations/theirs", `{"archived":true}`, http.StatusNotFound, contract.CodeNotFound},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			resp, body := h.do(http.MethodPatch, tt.path, tt.body, nil)
			msg := wantError(t, resp, body, tt.status, tt.code)
			if tt.path == "/api/conversations/theirs" && strings.Contains(msg, otherUser) {
				t.Errorf("the refusal names the owner: %s", msg)
			}
		})
	}
	for _, id := range []string{"c1", "theirs"} {
		c, err := h.store.GetConversation(t.Context(), id)
		if err != nil || c.Title != id || !c.ArchivedAt.IsZero() {
			t.Errorf("%s after the refusals: %+v, %v", id, c, err)
		}
	}
	for _, q := range []string{"?archived=2", "?archived=", "?archived=true", "?archived=1&archived=1", "?all=1", "?archived=1&x=1"} {
		resp, body := h.do(http.MethodGet, "/api/conversations"+q, "", nil)
		wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
	}
	resp, body := h.do(http.MethodPut, "/api/conversations/c1", `{"title":"x"}`, nil)
	wantError(t, resp, body, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)
	if allow := resp.Header.Get("Allow"); !strings.Contains(allow, http.MethodPatch) {
		t.Errorf("Allow = %q, want PATCH in it", allow)
	}
}

// statusWorker answers GET session with what state holds, for the list's
// checks of turns nobody follows.
type statusWorker struct {
	mu    sync.Mutex
	state map[string]contract.SessionState
	gets  int
	// listing: GET /v1/sessions answers the running ones of state (an
	// older worker without it answers 405).
	listing bool
	lists   int
	// elsewhere: sessions this worker replica does not hold (another
	// replica of a rolling update does): not listed, and their state is
	// 503 session_elsewhere.
	elsewhere map[string]bool
	// hold, when set, keeps a listing waiting until it is closed (or the
	// request ends): a worker that does not answer.
	hold chan struct{}
}

func (sw *statusWorker) set(st contract.SessionState) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.state[st.ConversationID] = st
}

func (sw *statusWorker) command(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet && r.URL.Path == contract.SessionsPath {
		sw.mu.Lock()
		if hold := sw.hold; hold != nil {
			sw.lists++
			sw.mu.Unlock()
			select {
			case <-hold:
			case <-r.Context().Done():
				return true
			}
			sw.mu.Lock()
			sw.lists--
		}
		defer sw.mu.Unlock()
		if !sw.listing {
			httpapi.WriteError(w, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed, "method GET is not allowed here; use POST")
			return true
		}
		sw.lists++
		out := contract.RunningSessions{Sessions: []contract.SessionState{}}
		for _, st := range sw.state {
			if st.Status == contract.StatusRunning && !sw.elsewhere[st.ConversationID] {
				out.Sessions = append(out.Sessions, st)
			}
		}
		httpapi.WriteJSON(w, http.StatusOK, out)
		return true
	}
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	if r.Method != http.MethodGet || !ok || strings.Contains(id, "/") {
		return false
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	st, ok := sw.state[id]
	if !ok {
		return false
	}
	sw.gets++
	if sw.elsewhere[id] {
		w.Header().Set("Retry-After", "1")
		httpapi.WriteError(w, http.StatusServiceUnavailable, contract.CodeSessionElsewhere, "another worker replica owns this conversation right now; retry shortly")
		return true
	}
	httpapi.WriteJSON(w, http.StatusOK, st)
	return true
}

func (sw *statusWorker) Gets() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.gets
}

func (sw *statusWorker) Lists() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.lists
}

// TestListStatusFromRunningSessions: with a worker that lists its running
// sessions, the list shows a turn this replica never saw start (another
// replica forwarded its message) and its end, reading the listing once per
// tenant-env at most every few seconds, and asking about a conversation
// only when a turn it believed running is not listed; during a worker's
// rolling update, a listing from the replica that does not hold a running
// session does not end its turn.
func TestListStatusFromRunningSessions(t *testing.T) {
	sw := &statusWorker{state: map[string]contract.SessionState{}, listing: true, elsewhere: map[string]bool{}}
	h := newHarness(t, harnessOptions{worker: fakeOptions{command: sw.command}})
	h.insertConversation("elsewhere", user, env)
	h.insertConversation("quiet", user, env)
	want := func(what string, lists, gets int, w map[string]string) {
		t.Helper()
		got := listStatus(t, h)
		for id, s := range w {
			if got[id] != s {
				t.Errorf("%s: %s is %q, want %q (all: %v)", what, id, got[id], s, got)
			}
		}
		if sw.Lists() != lists {
			t.Errorf("%s: the worker's running sessions were read %d times, want %d", what, sw.Lists(), lists)
		}
		if sw.Gets() != gets {
			t.Errorf("%s: the list asked about conversations one by one %d times, want %d", what, sw.Gets(), gets)
		}
	}
	want("nothing runs", 1, 0, map[string]string{"elsewhere": "idle", "quiet": "idle"})
	// Another replica forwarded a message: this one learns of the turn
	// from the next listing, not before.
	sw.set(contract.SessionState{ConversationID: "elsewhere", Status: contract.StatusRunning, RunningTurnID: "t_o", LastSeq: 7})
	want("read just now", 1, 0, map[string]string{"elsewhere": "idle"})
	h.clock.Advance(4 * time.Second)
	want("started elsewhere", 2, 0, map[string]string{"elsewhere": "running:t_o", "quiet": "idle"})
	// A rolling update: the listing reaches the worker replica that does
	// not hold the session, which cannot say it ended.
	sw.mu.Lock()
	sw.elsewhere["elsewhere"] = true
	sw.mu.Unlock()
	h.clock.Advance(4 * time.Second)
	want("listed by the other worker replica", 3, 1, map[string]string{"elsewhere": "running:t_o"})
	sw.mu.Lock()
	delete(sw.elsewhere, "elsewhere")
	sw.mu.Unlock()
	// It ends with nobody here following it: left out of the listing,
	// asked about, idle.
	sw.set(contract.SessionState{ConversationID: "elsewhere", Status: contract.StatusIdle, LastSeq: 9})
	h.clock.Advance(4 * time.Second)
	want("ended elsewhere", 4, 2, map[string]string{"elsewhere": "idle", "quiet": "idle"})
	h.clock.Advance(4 * time.Second)
	want("idle, nothing to ask", 5, 2, map[string]string{"elsewhere": "idle", "quiet": "idle"})
}

// TestListStatusWorkerDown: a worker that does not answer its listing
// stalls one list (for the check's timeout), not every later one: the next
// lists show the marks as they are while the listing runs on its own, and
// what it brings once the worker answers shows in the list after it.
func TestListStatusWorkerDown(t *testing.T) {
	sw := &statusWorker{state: map[string]contract.SessionState{}, listing: true, hold: make(chan struct{})}
	h := newHarness(t, harnessOptions{worker: fakeOptions{command: sw.command}})
	h.insertConversation("elsewhere", user, env)
	if got := listStatus(t, h); got["elsewhere"] != "idle" {
		t.Fatalf("first list, worker silent: %v", got)
	}
	// The turn starts through another replica; the worker still does not
	// answer. This list does not wait for it.
	sw.set(contract.SessionState{ConversationID: "elsewhere", Status: contract.StatusRunning, RunningTurnID: "t_o", LastSeq: 7})
	h.clock.Advance(4 * time.Second)
	if got := listStatus(t, h); got["elsewhere"] != "idle" {
		t.Fatalf("second list: %v", got)
	}
	poll.Until(t, "the background listing to reach the worker", func() bool { return sw.Lists() == 2 })
	// Only now does the worker answer: a list that had waited for it
	// would have given up already, and learned nothing.
	sw.mu.Lock()
	close(sw.hold)
	sw.hold = nil
	sw.mu.Unlock()
	poll.Until(t, "the list to show the turn the late listing brought", func() bool {
		return listStatus(t, h)["elsewhere"] == "running:t_o"
	})
	if sw.Lists() != 2 {
		t.Errorf("the worker's running sessions were read %d times, want 2 (no new listing within the recheck)", sw.Lists())
	}
}

// TestListStatusListingStaysInItsEnv: a worker's listing speaks for its
// own tenant-env only. A session it names of a conversation that lives in
// another env (a buggy or subverted worker) marks nothing there: one
// tenant-env's worker must not decide what another's list shows.
func TestListStatusListingStaysInItsEnv(t *testing.T) {
	sw := &statusWorker{state: map[string]contract.SessionState{}, listing: true}
	h := newHarness(t, harnessOptions{worker: fakeOptions{command: sw.command}})
	h.insertConversation("mine", user, env)
	h.insertConversation("elsewhere", user, otherEnv)
	sw.set(contract.SessionState{ConversationID: "elsewhere", Status: contract.StatusRunning, RunningTurnID: "t_forged", LastSeq: 99})
	got := listStatus(t, h)
	if _, ok := got["elsewhere"]; !ok {
		t.Fatalf("the list does not show the other env's conversation: %v", got)
	}
	if sw.Lists() != 1 {
		t.Fatalf("the worker's running sessions were read %d times, want 1", sw.Lists())
	}
	if got["elsewhere"] != "idle" {
		t.Errorf("%s's worker marked %s/elsewhere: %q", env, otherEnv, got["elsewhere"])
	}
}

// TestListStatusWithoutListing: a worker that cannot list its running
// sessions (405) still gets the turns believed to run asked about one by
// one.
func TestListStatusWithoutListing(t *testing.T) {
	sw := &statusWorker{state: map[string]contract.SessionState{}}
	h := newHarness(t, harnessOptions{worker: fakeOptions{command: sw.command}})
	h.insertConversation("busy", user, env)
	if resp, body := h.do(http.MethodPost, "/api/conversations/busy/messages", `{"text":"hi"}`, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %d %s", resp.StatusCode, body)
	}
	sw.set(contract.SessionState{ConversationID: "busy", Status: contract.StatusIdle, LastSeq: 9})
	h.clock.Advance(4 * time.Second)
	l := h.list("")
	if len(l.Conversations) != 1 || l.Conversations[0].Status != contract.StatusIdle {
		t.Fatalf("the ended turn still shows: %+v", l.Conversations)
	}
	if sw.Gets() != 1 {
		t.Errorf("the worker was asked about %d conversations, want 1", sw.Gets())
	}
}

// listStatus is each listed conversation's status: "idle", or "running:"
// and the turn.
func listStatus(t *testing.T, h *harness) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range h.list("").Conversations {
		out[c.ID] = c.Status
		if c.Status == contract.StatusRunning {
			out[c.ID] += ":" + c.RunningTurnID
		}
	}
	return out
}

// TestListStatus: a turn this replica started shows as running in the
// list; once nobody follows it the list asks the worker again, at most
// every few seconds, and shows its end; a turn seen to end on a relayed
// stream shows idle without asking.
func TestListStatus(t *testing.T) {
	sw := &statusWorker{state: map[string]contract.SessionState{}}
	var (
		streamMu sync.Mutex
		events   = map[string][]contract.Event{}
	)
	h := newHarness(t, harnessOptions{worker: fakeOptions{
		command: sw.command,
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			streamMu.Lock()
			evs := events[r.PathValue("id")]
			streamMu.Unlock()
			streamLog(w, r, evs)
		},
	}})
	h.insertConversation("busy", user, env)
	h.insertConversation("quiet", user, env)
	h.insertConversation("watched", user, env)
	want := func(what string, w map[string]string) {
		t.Helper()
		got := listStatus(t, h)
		for id, s := range w {
			if got[id] != s {
				t.Errorf("%s: %s is %q, want %q (all: %v)", what, id, got[id], s, got)
			}
		}
	}
	want("before anything", map[string]string{"busy": "idle", "quiet": "idle", "watched": "idle"})
	if sw.Gets() != 0 {
		t.Errorf("the list asked the worker %d times about conversations it knows nothing of", sw.Gets())
	}

	if resp, body := h.do(http.MethodPost, "/api/conversations/busy/messages", `{"text":"hi"}`, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %d %s", resp.StatusCode, body)
	}
	want("just sent", map[string]string{"busy": "running:t_1", "quiet": "idle"})
	if sw.Gets() != 0 {
		t.Errorf("a fresh mark was checked with the worker")
	}
	// Still running when asked again, later.
	sw.set(contract.SessionState{ConversationID: "busy", Status: contract.StatusRunning, RunningTurnID: "t_1", LastSeq: 5})
	h.clock.Advance(4 * time.Second)
	want("running, checked", map[string]string{"busy": "running:t_1"})
	if sw.Gets() != 1 {
		t.Errorf("the worker was asked %d times, want 1", sw.Gets())
	}
	want("asked again at once", map[string]string{"busy": "running:t_1"})
	if sw.Gets() != 1 {
		t.Errorf("a mark checked just now was checked again (%d)", sw.Gets())
	}
	// The turn ended with nobody watching: the next check says so.
	sw.set(contract.SessionState{ConversationID: "busy", Status: contract.StatusIdle, LastSeq: 9})
	h.clock.Advance(4 * time.Second)
	want("ended", map[string]string{"busy": "idle"})
	gets := sw.Gets()
	h.clock.Advance(time.Hour)
	want("idle stays idle without asking", map[string]string{"busy": "idle"})
	if sw.Gets() != gets {
		t.Errorf("an idle mark was checked with the worker")
	}

	// A relayed stream: its turn.started and turn.finished move the mark,
	// and a followed turn is never asked about.
	at := h.clock.Now()
	streamMu.Lock()
	events["watched"] = []contract.Event{
		{Seq: 1, Kind: contract.KindSessionCreated, ConversationID: "watched", Time: at},
		{Seq: 2, Kind: contract.KindUserMessage, ConversationID: "watched", TurnID: "t_w", Time: at, Text: "x", ClientMessageID: "m1"},
		{Seq: 3, Kind: contract.KindTurnStarted, ConversationID: "watched", TurnID: "t_w", Time: at},
	}
	streamMu.Unlock()
	resp, cancel := h.openStream("/api/conversations/watched/stream", nil)
	rd := sse.NewReader(resp.Body, 1<<20)
	for {
		ev, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.ID == "3" {
			break
		}
	}
	gets = sw.Gets()
	h.clock.Advance(time.Minute)
	want("followed, running", map[string]string{"watched": "running:t_w"})
	if sw.Gets() != gets {
		t.Errorf("a followed turn was checked with the worker")
	}
	cancel()
	// The stream ended; the next events come on a new one, once the hub
	// of the first has stopped (a browser joining it would be given its
	// worker stream, which the fake never adds to).
	for deadline := time.Now().Add(10 * time.Second); h.cp.StreamUpstreams() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first stream's hub did not stop")
		}
		time.Sleep(5 * time.Millisecond)
	}
	streamMu.Lock()
	events["watched"] = append(events["watched"], contract.Event{Seq: 4, Kind: contract.KindTurnFinished, ConversationID: "watched", TurnID: "t_w", Time: at,
		Finish: &contract.TurnFinish{StopReason: "end_turn", ModelCalls: 1}})
	streamMu.Unlock()
	resp, cancel = h.openStream("/api/conversations/watched/stream", http.Header{"Last-Event-ID": {"3"}})
	defer cancel()
	rd = sse.NewReader(resp.Body, 1<<20)
	if ev, err := rd.Next(); err != nil || ev.ID != "4" {
		t.Fatalf("second stream: %+v %v", ev, err)
	}
	want("followed, ended", map[string]string{"watched": "idle", "busy": "idle"})
}

// TestMyBudget: the caller's own limits with what was used and held, and
// nobody else's.
func TestMyBudget(t *testing.T) {
	h := newHarness(t, harnessOptions{budget: true})
	ctx := t.Context()
	now := h.clock.Now()
	for _, l := range []budget.Limit{
		{Subject: budget.User(user), Kind: budget.SpendPerDay, Max: int64(5 * budget.Dollar), Hard: true},
		{Subject: budget.User(user), Kind: budget.RequestsPerMinute, Max: 60},
		{Subject: budget.User(otherUser), Kind: budget.SpendPerDay, Max: int64(budget.Dollar)},
	} {
		if err := h.store.PutBudgetLimit(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for i, who := range []string{user, user, otherUser} {
		if _, err := h.store.SettleBudget(ctx, budget.Entry{ID: "call" + strconv.Itoa(i), Tenant: tenant, Env: env, User: who, Conversation: "c1",
			Usage: budget.Usage{Model: "claude-sonnet-4-6", InputTokens: 1000}, Cost: budget.Dollar / 4, Status: 200, StartedAt: now, SettledAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	resp, body := h.do(http.MethodGet, "/api/me/budget", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/me/budget: %d %s", resp.StatusCode, body)
	}
	var got controlplane.StatusJSON
	decodeJSON(t, body, &got)
	if got.Subject != user || len(got.Limits) != 2 {
		t.Fatalf("budget: %s", body)
	}
	for _, l := range got.Limits {
		if l.Subject != user {
			t.Errorf("another subject's limit: %+v", l)
		}
		if l.Kind == budget.SpendPerDay {
			if *l.MaxUSD != "5" && *l.MaxUSD != "5.00" || *l.UsedUSD != "0.50" && *l.UsedUSD != "0.5" || l.ResetsAt == nil || l.Window != "day" {
				t.Errorf("daily limit: max %v used %v resets %v window %s (%s)", *l.MaxUSD, *l.UsedUSD, l.ResetsAt, l.Window, body)
			}
			if *l.RemainingUSD != "4.50" && *l.RemainingUSD != "4.5" {
				t.Errorf("remaining %s", *l.RemainingUSD)
			}
		}
	}
	for _, q := range []string{"?user=" + otherUser, "?x"} {
		resp, body := h.do(http.MethodGet, "/api/me/budget"+q, "", nil)
		wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
	}
	resp, body = h.do(http.MethodPost, "/api/me/budget", "{}", nil)
	wantError(t, resp, body, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)

	noBudget := newHarness(t, harnessOptions{})
	resp, body = noBudget.do(http.MethodGet, "/api/me/budget", "", nil)
	wantError(t, resp, body, http.StatusServiceUnavailable, contract.CodeUnavailable)
}

// TestTurnUsage: each turn's calls and cost come from the ledger, given to
// turns by when the gateway started them; a call between two turns (the
// clocks disagreeing) goes to the nearer one.
func TestTurnUsage(t *testing.T) {
	t0 := start
	ev := func(seq int64, kind, turn string, d time.Duration) contract.Event {
		e := contract.Event{Seq: seq, Kind: kind, ConversationID: "c1", TurnID: turn, Time: t0.Add(d)}
		switch kind {
		case contract.KindTurnFinished:
			e.Finish = &contract.TurnFinish{StopReason: "end_turn", ModelCalls: 1}
		case contract.KindSessionCreated:
			e.TurnID = ""
			e.Session = &contract.SessionEvent{Harness: "fake"}
		}
		return e
	}
	log := []contract.Event{
		ev(1, contract.KindSessionCreated, "", 0),
		ev(2, contract.KindTurnStarted, "t_a", 10*time.Second),
		ev(3, contract.KindTurnFinished, "t_a", 20*time.Second),
		ev(4, contract.KindTurnStarted, "t_b", 60*time.Second),
		ev(5, contract.KindTurnFinished, "t_b", 70*time.Second),
		ev(6, contract.KindTurnStarted, "t_c", 80*time.Second), // still running
	}
	sw := &statusWorker{state: map[string]contract.SessionState{}}
	sw.set(contract.SessionState{ConversationID: "c1", Status: contract.StatusRunning, RunningTurnID: "t_c", LastSeq: 6})
	h := newHarness(t, harnessOptions{budget: true, worker: fakeOptions{
		command: sw.command,
		stream:  func(w http.ResponseWriter, r *http.Request, n int) { streamLog(w, r, log) },
	}})
	h.insertConversation("c1", user, env)
	h.insertConversation("theirs", otherUser, env)
	h.clock.Advance(2 * time.Minute)
	for i, c := range []struct {
		at   time.Duration
		cost budget.Money
		conv string
	}{
		{11 * time.Second, 10 * budget.Microdollar, "c1"},  // t_a
		{15 * time.Second, 5 * budget.Microdollar, "c1"},   // t_a
		{24 * time.Second, 1 * budget.Microdollar, "c1"},   // after t_a, nearer it than t_b
		{58 * time.Second, 100 * budget.Microdollar, "c1"}, // before t_b, nearer it
		{85 * time.Second, 7 * budget.Microdollar, "c1"},   // t_c, running
		{15 * time.Second, budget.Dollar, "other"},         // another conversation
	} {
		if _, err := h.store.SettleBudget(t.Context(), budget.Entry{ID: "call" + strconv.Itoa(i), Tenant: tenant, Env: env, User: user, Conversation: c.conv,
			Usage: budget.Usage{Model: "claude-sonnet-4-6", InputTokens: 100, OutputTokens: 10}, Cost: c.cost, Status: 200,
			StartedAt: t0.Add(c.at), SettledAt: t0.Add(c.at + time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	// The call that named the conversation, during t_a: part of its cost,
	// not of its calls or tokens.
	if _, err := h.store.SettleBudget(t.Context(), budget.Entry{ID: "title-call", Tenant: tenant, Env: env, User: user, Conversation: "c1",
		Usage: budget.Usage{Model: "claude-sonnet-4-6", InputTokens: 30, OutputTokens: 5}, Cost: 2 * budget.Microdollar, Status: 200,
		StartedAt: t0.Add(12 * time.Second), SettledAt: t0.Add(13 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := h.store.RecordUsage(t.Context(), store.UsageRecord{ID: "title-call", Tenant: tenant, Env: env, ConversationID: "c1", UserID: user,
		Model: "claude-sonnet-4-6", Status: 200, InputTokens: 30, OutputTokens: 5, StartedAt: t0.Add(12 * time.Second), Purpose: store.PurposeTitle}); err != nil {
		t.Fatal(err)
	}
	wantTurn := map[string]struct {
		calls int64
		cost  string
		title string
	}{
		"t_a": {3, "0.000018", "0.000002"},
		"t_b": {1, "0.0001", ""},
		"t_c": {1, "0.000007", ""},
	}
	for turn, w := range wantTurn {
		resp, body := h.do(http.MethodGet, "/api/conversations/c1/turns/"+turn+"/usage", "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", turn, resp.StatusCode, body)
		}
		var u controlplane.TurnUsage
		decodeJSON(t, body, &u)
		if u.TurnID != turn || u.Calls != w.calls || u.CostUSD != w.cost || u.InputTokens != 100*w.calls || u.OutputTokens != 10*w.calls ||
			u.TitleCostUSD != w.title || (u.TitleCalls == 1) != (w.title != "") {
			t.Errorf("%s: %+v, want %d calls costing %s", turn, u, w.calls, w.cost)
		}
	}
	// The history page carries the usage of the turns that end on it.
	resp, body := h.do(http.MethodGet, "/api/conversations/c1/events", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("history: %d %s", resp.StatusCode, body)
	}
	var page controlplane.HistoryPage
	decodeJSON(t, body, &page)
	if len(page.TurnUsage) != 2 || page.TurnUsage["t_a"] == nil || page.TurnUsage["t_a"].CostUSD != "0.000018" || page.TurnUsage["t_b"].Calls != 1 {
		t.Errorf("history turn_usage: %s", body)
	}
	resp, body = h.do(http.MethodGet, "/api/conversations/c1/events?before=3&limit=2", "", nil)
	var older controlplane.HistoryPage
	decodeJSON(t, body, &older)
	if resp.StatusCode != http.StatusOK || len(older.Events) != 2 || older.TurnUsage != nil {
		t.Errorf("a page on which no turn ends has turn_usage: %s", body)
	}

	h.wantRefusedGETs(t, map[string]refusal{
		"/api/conversations/c1/turns/t_zzz/usage":   notFound,
		"/api/conversations/c1/turns/-t/usage":      invalidID,
		"/api/conversations/c1/turns/t_a/usage?x=1": badRequest,
		"/api/conversations/theirs/turns/t_a/usage": notFound,
		"/api/conversations/nosuch/turns/t_a/usage": notFound,
		"/api/conversations/-bad/turns/t_a/usage":   invalidID,
	})
	resp, body = h.do(http.MethodPost, "/api/conversations/c1/turns/t_a/usage", "{}", nil)
	wantError(t, resp, body, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)
	noBudget := newHarness(t, harnessOptions{})
	noBudget.insertConversation("c1", user, env)
	resp, body = noBudget.do(http.MethodGet, "/api/conversations/c1/turns/t_a/usage", "", nil)
	wantError(t, resp, body, http.StatusServiceUnavailable, contract.CodeUnavailable)
}
