package chatclient

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/proxytest"
	"github.com/talkide/platform/internal/sse"
)

// fakeCP is a hand-written fake of the control-plane's browser API with an
// in-memory event log per conversation and knobs to misbehave.
type fakeCP struct {
	srv *httptest.Server

	mu sync.Mutex // guards every field below
	// token, when set, must arrive as a bearer token.
	token string
	convs map[string]*fakeConv
	// changed is closed and replaced whenever an event is appended.
	changed chan struct{}
	// manual leaves sent turns running until finishTurn or an interrupt;
	// otherwise a send runs its whole turn at once, failing it when the
	// text starts with "fail" and leaving it running when it starts with
	// "slow".
	manual bool
	// sendFail and streamFail answer that many sends / stream requests
	// with 503 before behaving.
	sendFail, streamFail int
	// conns scripts the stream connections in order: connection i ends
	// (or, with hang, goes silent) after writing seq conns[i].cutAfter, or
	// before writing any event if that is negative.
	conns []connScript
	// overlap makes a reconnect replay that many events before the seq
	// it was asked to start after.
	overlap int64
	// junk is written raw at the start of the first stream connection.
	junk string
	// dropAnswers handles that many sends and then breaks their
	// connections instead of answering, as if the answer were lost.
	dropAnswers int
	// holdInterrupts, when non-nil, makes interrupt requests wait until
	// it is closed (or the request ends).
	holdInterrupts chan struct{}
	// attachFail answers that many attachments 503 too_many_uploads, as a
	// control-plane without room for them does.
	attachFail int

	// What happened.
	sendIDs    []string // client_message_id of every send request
	sentTexts  []string // texts of accepted (202) sends
	streamReqs []streamReq
	interrupts int
	conflicts  int
	attached   []string   // "PATH:BODY" of every attachment stored
	sentFiles  [][]string // the Attachments of accepted (202) sends

	// When non-nil, told about each accepted send (its turn id) and each
	// 409; the test must make them big enough.
	sent     chan string
	conflict chan struct{}
	// When non-nil, told about each interrupt request as it arrives.
	interrupted chan struct{}
}

type connScript struct {
	cutAfter int64
	hang     bool
}

type streamReq struct{ LastEventID, After string }

type fakeConv struct {
	id, title string
	createdAt time.Time
	events    []contract.Event // events[i].Seq == i+1
	running   string           // turn id, "" when idle
	turns     int
	byCMID    map[string]contract.SendMessageResponse
}

var fakeTime = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// newFakeWithC1 is a fake control-plane with one conversation, c1, and no
// events yet.
func newFakeWithC1(t *testing.T) *fakeCP {
	t.Helper()
	f := newFakeCP(t)
	f.addConv("c1", 0)
	return f
}

func newFakeCP(t *testing.T) *fakeCP {
	t.Helper()
	f := &fakeCP{convs: make(map[string]*fakeConv), changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/conversations", f.create)
	mux.HandleFunc("GET /api/conversations/{id}", f.get)
	mux.HandleFunc("POST /api/conversations/{id}/messages", f.send)
	mux.HandleFunc("POST /api/conversations/{id}/interrupt", f.interrupt)
	mux.HandleFunc("POST /api/conversations/{id}/attachments", f.attach)
	mux.HandleFunc("GET /api/conversations/{id}/stream", f.stream)
	f.srv = httptest.NewServer(f.auth(mux))
	t.Cleanup(f.srv.Close)
	return f
}

// client returns a client of the fake with retry delays too short to slow
// the tests.
func (f *fakeCP) client(t *testing.T, opts *Options) *Client {
	t.Helper()
	c, err := New(f.srv.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	fastRetries(c)
	return c
}

// behindProxy is a fake control-plane with conversation c1, a proxy in
// front of it that the test can take down, and a client of the proxy that
// retries at once.
func behindProxy(t *testing.T) (*fakeCP, *proxytest.Proxy, *Client) {
	t.Helper()
	f := newFakeWithC1(t)
	p := proxytest.New(t, f.srv.Listener.Addr().String())
	c, err := New(p.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fastRetries(c)
	return f, p, c
}

// wantSent checks the texts of the turns started, in order.
func (f *fakeCP) wantSent(t *testing.T, want ...string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff(want, f.sentTexts); diff != "" {
		t.Errorf("turns started (-want +got):\n%s", diff)
	}
}

func fastRetries(c *Client) {
	c.sendRetry = backoff.Policy{Base: time.Millisecond, Max: time.Millisecond}
	c.retryAfterMax = time.Millisecond
	c.streamRetry = backoff.Policy{Base: time.Millisecond, Max: 2 * time.Millisecond}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, contract.Error{Error: contract.ErrorBody{Code: code, Message: msg}})
}

func (f *fakeCP) auth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		tok := f.token
		f.mu.Unlock()
		if tok != "" && r.Header.Get("Authorization") != "Bearer "+tok {
			writeErr(w, http.StatusUnauthorized, contract.CodeUnauthorized, "no valid credentials")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// addConv creates a conversation with n text.delta events of turn "t_0".
func (f *fakeCP) addConv(id string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.convLocked(id)
	for i := range n {
		f.appendLocked(c, contract.Event{Kind: contract.KindTextDelta, TurnID: "t_0", Text: fmt.Sprintf("e%d ", i+1)})
	}
}

func (f *fakeCP) convLocked(id string) *fakeConv {
	c := f.convs[id]
	if c == nil {
		c = &fakeConv{id: id, createdAt: fakeTime, byCMID: make(map[string]contract.SendMessageResponse)}
		f.convs[id] = c
	}
	return c
}

func (f *fakeCP) appendLocked(c *fakeConv, evs ...contract.Event) {
	for _, ev := range evs {
		ev.Seq = int64(len(c.events) + 1)
		ev.ConversationID = c.id
		ev.Time = fakeTime
		c.events = append(c.events, ev)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// startTurn starts a turn as if another client had sent text.
func (f *fakeCP) startTurn(convID, text string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.startTurnLocked(f.convLocked(convID), text, "m_other")
}

func (f *fakeCP) startTurnLocked(c *fakeConv, text, cmid string) string {
	c.turns++
	turn := "t_" + strconv.Itoa(c.turns)
	c.running = turn
	f.appendLocked(c,
		contract.Event{Kind: contract.KindUserMessage, TurnID: turn, ClientMessageID: cmid, Text: text},
		contract.Event{Kind: contract.KindTurnStarted, TurnID: turn})
	return turn
}

// finishTurn ends a running turn with a reply, failing it if fail is set.
func (f *fakeCP) finishTurn(convID, turn string, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.convLocked(convID)
	f.finishTurnLocked(c, turn, "done", fail)
}

func (f *fakeCP) finishTurnLocked(c *fakeConv, turn, reply string, fail bool) {
	if c.running == turn {
		c.running = ""
	}
	f.appendLocked(c,
		contract.Event{Kind: contract.KindTextDelta, TurnID: turn, Text: "echo: "},
		contract.Event{Kind: contract.KindTextDelta, TurnID: turn, Text: reply},
		contract.Event{Kind: contract.KindMessage, TurnID: turn, Text: "echo: " + reply})
	if fail {
		f.appendLocked(c, contract.Event{Kind: contract.KindTurnFailed, TurnID: turn,
			Failure: &contract.TurnFailure{Code: contract.FailModelError, Message: "simulated"}})
		return
	}
	f.appendLocked(c, contract.Event{Kind: contract.KindTurnFinished, TurnID: turn,
		Finish: &contract.TurnFinish{StopReason: "end_turn", ModelCalls: 1, DurationMS: 1200}})
}

func (f *fakeCP) create(w http.ResponseWriter, r *http.Request) {
	var req struct{ ID, Title string }
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, contract.CodeBadRequest, err.Error())
		return
	}
	if req.ID == "" {
		req.ID = "c_generated"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	status := http.StatusOK
	if f.convs[req.ID] == nil {
		status = http.StatusCreated
		f.convLocked(req.ID).title = req.Title
	}
	c := f.convs[req.ID]
	writeJSON(w, status, map[string]any{"id": c.id, "title": c.title, "created_at": c.createdAt})
}

// lookup returns the conversation of the request, or answers 404.
func (f *fakeCP) lookupLocked(w http.ResponseWriter, r *http.Request) *fakeConv {
	c := f.convs[r.PathValue("id")]
	if c == nil {
		writeErr(w, http.StatusNotFound, contract.CodeNotFound, "no such conversation")
	}
	return c
}

func (f *fakeCP) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.lookupLocked(w, r)
	if c == nil {
		return
	}
	st := contract.SessionState{ConversationID: c.id, Status: contract.StatusIdle, RunningTurnID: c.running,
		LastSeq: int64(len(c.events)), Turns: c.turns, CreatedAt: c.createdAt, Harness: "native"}
	if c.running != "" {
		st.Status = contract.StatusRunning
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": c.id, "title": c.title, "created_at": c.createdAt, "state": st})
}

func (f *fakeCP) send(w http.ResponseWriter, r *http.Request) {
	var req contract.SendMessageRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, contract.CodeBadRequest, err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendIDs = append(f.sendIDs, req.ClientMessageID)
	if f.sendFail > 0 {
		f.sendFail--
		writeErr(w, http.StatusServiceUnavailable, contract.CodeUnavailable, "worker starting")
		return
	}
	c := f.lookupLocked(w, r)
	if c == nil {
		return
	}
	if resp, ok := c.byCMID[req.ClientMessageID]; ok {
		if f.dropAnswers > 0 {
			f.dropAnswers--
			dropAnswer(w)
			return
		}
		resp.Duplicate = true
		writeJSON(w, http.StatusOK, resp)
		return
	}
	if c.running != "" {
		f.conflicts++
		if f.conflict != nil {
			f.conflict <- struct{}{}
		}
		writeErr(w, http.StatusConflict, contract.CodeTurnRunning, "a turn is running")
		return
	}
	turn := f.startTurnLocked(c, req.Text, req.ClientMessageID)
	resp := contract.SendMessageResponse{ConversationID: c.id, ClientMessageID: req.ClientMessageID,
		TurnID: turn, Seq: int64(len(c.events) - 1)}
	c.byCMID[req.ClientMessageID] = resp
	f.sentTexts = append(f.sentTexts, req.Text)
	f.sentFiles = append(f.sentFiles, req.Attachments)
	if !f.manual && !strings.HasPrefix(req.Text, "slow") {
		f.finishTurnLocked(c, turn, req.Text, strings.HasPrefix(req.Text, "fail"))
	}
	if f.sent != nil {
		f.sent <- turn // before the answer: the turn may end before the client hears of it
	}
	if f.dropAnswers > 0 {
		f.dropAnswers--
		dropAnswer(w)
		return
	}
	writeJSON(w, http.StatusAccepted, resp)
}

// dropAnswer breaks the connection of a request that was handled.
func dropAnswer(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func (f *fakeCP) interrupt(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	arrived, hold := f.interrupted, f.holdInterrupts
	f.mu.Unlock()
	if arrived != nil {
		arrived <- struct{}{}
	}
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.lookupLocked(w, r)
	if c == nil {
		return
	}
	f.interrupts++
	resp := contract.InterruptResponse{ConversationID: c.id, TurnID: c.running, Interrupted: c.running != ""}
	if c.running != "" {
		f.appendLocked(c, contract.Event{Kind: contract.KindTurnFailed, TurnID: c.running,
			Failure: &contract.TurnFailure{Code: contract.FailInterrupted, Message: "interrupted by user"}})
		c.running = ""
	}
	writeJSON(w, http.StatusOK, resp)
}

func (f *fakeCP) stream(w http.ResponseWriter, r *http.Request) {
	lastID, afterQ := r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")
	from, _ := strconv.ParseInt(afterQ, 10, 64)
	if lastID != "" {
		from, _ = strconv.ParseInt(lastID, 10, 64)
	}
	f.mu.Lock()
	f.streamReqs = append(f.streamReqs, streamReq{lastID, afterQ})
	n := len(f.streamReqs) - 1
	if f.streamFail > 0 {
		f.streamFail--
		f.mu.Unlock()
		writeErr(w, http.StatusServiceUnavailable, contract.CodeUnavailable, "try again")
		return
	}
	c := f.lookupLocked(w, r)
	if c == nil {
		f.mu.Unlock()
		return
	}
	var script connScript
	if n < len(f.conns) {
		script = f.conns[n]
	}
	if n > 0 {
		from = max(from-f.overlap, 0)
	}
	junk := f.junk
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	sse.WriteComment(w, "hello")
	if n == 0 && junk != "" {
		fmt.Fprint(w, junk)
	}
	flusher := w.(http.Flusher)
	if script.cutAfter < 0 {
		return
	}
	for {
		f.mu.Lock()
		evs := c.events[from:]
		changed := f.changed
		f.mu.Unlock()
		for _, ev := range evs {
			data, _ := json.Marshal(ev)
			sse.Write(w, strconv.FormatInt(ev.Seq, 10), ev.Kind, data)
			sse.WriteComment(w, "heartbeat")
			from = ev.Seq
			if ev.Seq == script.cutAfter {
				flusher.Flush()
				if script.hang {
					<-r.Context().Done()
				}
				return
			}
		}
		flusher.Flush()
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

// attach stores an attachment as the control-plane and the worker do, as
// far as a client can tell: the name checked, a taken one suffixed.
func (f *fakeCP) attach(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Content-Type") != "application/octet-stream" {
		writeErr(w, http.StatusUnsupportedMediaType, contract.CodeBadRequest, "not application/octet-stream")
		return
	}
	name := r.URL.Query().Get("name")
	if err := contract.ValidateAttachmentName(name); err != nil {
		writeErr(w, http.StatusBadRequest, contract.CodeBadRequest, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, contract.MaxAttachmentBytes))
	if err != nil {
		writeErr(w, http.StatusRequestEntityTooLarge, contract.CodeTooLarge, err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lookupLocked(w, r) == nil {
		return
	}
	if f.attachFail > 0 {
		f.attachFail--
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusServiceUnavailable, contract.CodeTooManyUploads, "the server holds as many uploaded bytes as it may at once")
		return
	}
	for n := 0; ; n++ {
		p := contract.AttachmentsDir + "/" + contract.AttachmentCandidate(name, n)
		if !slices.ContainsFunc(f.attached, func(s string) bool { return strings.HasPrefix(s, p+":") }) {
			f.attached = append(f.attached, p+":"+string(body))
			writeJSON(w, http.StatusCreated, contract.Attachment{Path: p, Size: int64(len(body))})
			return
		}
	}
}
