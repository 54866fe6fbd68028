package controlplane_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/httpapi"
)

func TestCreateConversation(t *testing.T) {
	tests := map[string]struct {
		body      string
		wantID    string // "" with wantStatus 201: a generated id
		wantTitle string
		// wantStatus is the answer; for errors wantCode is its code.
		wantStatus int
		wantCode   string
	}{
		"no body":            {body: "", wantStatus: http.StatusCreated},
		"empty object":       {body: `{}`, wantStatus: http.StatusCreated},
		"title only":         {body: `{"title":"hello"}`, wantTitle: "hello", wantStatus: http.StatusCreated},
		"id and title":       {body: `{"id":"demo","title":"hello"}`, wantID: "demo", wantTitle: "hello", wantStatus: http.StatusCreated},
		"title at the limit": {body: `{"title":"` + strings.Repeat("t", 200) + `"}`, wantTitle: strings.Repeat("t", 200), wantStatus: http.StatusCreated},
		"bad id":             {body: `{"id":"../etc"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeInvalidID},
		"id with a dot":      {body: `{"id":"a.b"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeInvalidID},
		"title too long":     {body: `{"title":"` + strings.Repeat("t", 201) + `"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"unknown field":      {body: `{"id":"demo","titel":"x"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"wrong type":         {body: `{"id":7}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"trailing data":      {body: `{"id":"demo"}}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"body over 1 MiB": {
			body:       `{"title":"` + strings.Repeat("t", 1<<20) + `"}`,
			wantStatus: http.StatusRequestEntityTooLarge, wantCode: contract.CodeTooLarge,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			resp, body := h.do(http.MethodPost, "/api/conversations", tt.body, nil)
			if tt.wantCode != "" {
				wantError(t, resp, body, tt.wantStatus, tt.wantCode)
				h.wantNoWorkerRequests(t, "a refused create")
				if cs, err := h.store.ListConversations(t.Context(), user); err != nil || len(cs) != 0 {
					t.Errorf("stored conversations = %v, %v; want none", cs, err)
				}
				return
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			var got controlplane.ConversationView
			decodeJSON(t, body, &got)
			if tt.wantID == "" {
				if !strings.HasPrefix(got.ID, "c_") || contract.ValidateConversationID(got.ID) != nil {
					t.Errorf("generated id %q is not a valid c_ id", got.ID)
				}
			} else if got.ID != tt.wantID {
				t.Errorf("id = %q, want %q", got.ID, tt.wantID)
			}
			want := controlplane.ConversationView{
				ID: got.ID, Title: tt.wantTitle, Tenant: "acme", Env: "prod", User: user, CreatedAt: start, LastActivityAt: start,
				State: &contract.SessionState{ConversationID: got.ID, Created: true, Status: contract.StatusIdle, LastSeq: 2, CreatedAt: start, Harness: "fake"},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("view (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]contract.CreateSessionRequest{{ConversationID: got.ID, UserID: user}}, h.worker.Creates()); diff != "" {
				t.Errorf("worker creates (-want +got):\n%s", diff)
			}
			c, err := h.store.GetConversation(t.Context(), got.ID)
			if err != nil {
				t.Fatal(err)
			}
			if c.UserID != user || c.Tenant != tenant || c.Env != env || c.Title != tt.wantTitle {
				t.Errorf("stored %+v", c)
			}
		})
	}
}

func TestCreateConversationIsIdempotent(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	var views []controlplane.ConversationView
	for i, wantStatus := range []int{http.StatusCreated, http.StatusOK, http.StatusOK} {
		h.clock.Advance(time.Second) // a retry keeps the first CreatedAt
		resp, body := h.do(http.MethodPost, "/api/conversations", `{"id":"demo","title":"first"}`, nil)
		if resp.StatusCode != wantStatus {
			t.Fatalf("call %d: status = %d, want %d: %s", i, resp.StatusCode, wantStatus, body)
		}
		var v controlplane.ConversationView
		decodeJSON(t, body, &v)
		views = append(views, v)
	}
	if views[0].State == nil || !views[0].State.Created {
		t.Errorf("first call: state %+v, want created", views[0].State)
	}
	for i, v := range views[1:] {
		if v.State == nil || v.State.Created {
			t.Errorf("call %d: state %+v, want not created", i+1, v.State)
		}
		if diff := cmp.Diff(views[0], v, cmpopts.IgnoreFields(controlplane.ConversationView{}, "State")); diff != "" {
			t.Errorf("call %d view (-first +got):\n%s", i+1, diff)
		}
	}
	// The worker side is idempotent too, and is asked every time: a create
	// that failed at the worker is retried by creating again.
	one := contract.CreateSessionRequest{ConversationID: "demo", UserID: user}
	want := []contract.CreateSessionRequest{one, one, one}
	if diff := cmp.Diff(want, h.worker.Creates()); diff != "" {
		t.Errorf("worker creates (-want +got):\n%s", diff)
	}
	if cs, err := h.store.ListConversations(t.Context(), user); err != nil || len(cs) != 1 {
		t.Errorf("stored = %v, %v; want one conversation", cs, err)
	}
}

func TestCreateConversationTakenByAnotherUser(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.insertConversation("taken", otherUser, env)
	resp, body := h.do(http.MethodPost, "/api/conversations", `{"id":"taken"}`, nil)
	wantError(t, resp, body, http.StatusConflict, contract.CodeConflict)
	h.wantNoWorkerRequests(t, "")
}

func TestCreateConversationWorkerUnreachable(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.setWorkerURL(closedURL(t))
	resp, body := h.do(http.MethodPost, "/api/conversations", `{"id":"demo"}`, nil)
	wantError(t, resp, body, http.StatusBadGateway, contract.CodeUnavailable)
	// The conversation is stored; creating it again retries the worker.
	if _, err := h.store.GetConversation(t.Context(), "demo"); err != nil {
		t.Errorf("GetConversation: %v", err)
	}
	h.setWorkerURL(h.worker.srv.URL)
	resp, body = h.do(http.MethodPost, "/api/conversations", `{"id":"demo"}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("retry: status = %d, want 200: %s", resp.StatusCode, body)
	}
}

func TestListConversations(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	type item struct {
		ID        string    `json:"id"`
		Title     string    `json:"title"`
		Tenant    string    `json:"tenant"`
		Env       string    `json:"env"`
		User      string    `json:"user"`
		CreatedAt time.Time `json:"created_at"`
		Activity  time.Time `json:"last_activity_at"`
		Status    string    `json:"status"`
		Turn      string    `json:"running_turn_id"`
	}
	list := func() []item {
		t.Helper()
		resp, body := h.do(http.MethodGet, "/api/conversations", "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status = %d: %s", resp.StatusCode, body)
		}
		var out struct {
			Conversations []item `json:"conversations"`
		}
		decodeJSON(t, body, &out)
		if out.Conversations == nil {
			t.Errorf("conversations is null, want a list: %s", body)
		}
		return out.Conversations
	}
	if got := list(); len(got) != 0 {
		t.Errorf("fresh list = %v, want empty", got)
	}

	// Created in the order c, a, b: newest first is b, a, c, which is not
	// the order of the ids either way.
	var want []item
	for _, id := range []string{"c", "a", "b"} {
		h.clock.Advance(time.Second)
		resp, body := h.do(http.MethodPost, "/api/conversations", `{"id":"`+id+`","title":"t-`+id+`"}`, nil)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %d %s", id, resp.StatusCode, body)
		}
		want = append([]item{{ID: id, Title: "t-" + id, Tenant: tenant, Env: env, User: user, CreatedAt: h.clock.Now(), Activity: h.clock.Now(), Status: contract.StatusIdle}}, want...)
	}
	h.clock.Advance(time.Second)
	h.insertConversation("bobs", otherUser, env) // newest, but not alice's
	if diff := cmp.Diff(want, list()); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}

	// A message moves its conversation to the top: the list is by last
	// activity.
	h.clock.Advance(time.Second)
	resp, body := h.do(http.MethodPost, "/api/conversations/c/messages", `{"text":"hello","client_message_id":"m_1"}`, nil)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %d %s", resp.StatusCode, body)
	}
	c := want[2]
	c.Activity, c.Status = h.clock.Now(), ""
	got := list()
	if len(got) == 3 {
		got[0].Status, got[0].Turn = "", ""
	}
	if diff := cmp.Diff([]item{c, want[0], want[1]}, got); diff != "" {
		t.Errorf("list after a message in c (-want +got):\n%s", diff)
	}
}

func TestGetConversation(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	resp, body := h.do(http.MethodPost, "/api/conversations", `{"id":"demo","title":"hi"}`, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	h.insertConversation("nosession", user, env) // stored, unknown to the worker

	tests := map[string]struct {
		id              string
		workerURL       string // "" means the fake worker
		wantState       bool
		wantWorkerError string // a substring
	}{
		"with state":                 {id: "demo", wantState: true},
		"worker unreachable":         {id: "demo", workerURL: closedURL(t), wantWorkerError: "unreachable"},
		"worker has no such session": {id: "nosession", wantWorkerError: "no session nosession"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if tt.workerURL != "" {
				h.setWorkerURL(tt.workerURL)
				defer h.setWorkerURL(h.worker.srv.URL)
			}
			resp, body := h.do(http.MethodGet, "/api/conversations/"+tt.id, "", nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200: %s", resp.StatusCode, body)
			}
			var raw map[string]json.RawMessage
			decodeJSON(t, body, &raw)
			if _, ok := raw["state"]; ok != tt.wantState {
				t.Errorf("state present = %v, want %v: %s", ok, tt.wantState, body)
			}
			var v controlplane.ConversationView
			decodeJSON(t, body, &v)
			if v.ID != tt.id {
				t.Errorf("id = %q, want %q", v.ID, tt.id)
			}
			if tt.wantState && (v.State == nil || v.State.ConversationID != tt.id || v.WorkerError != "") {
				t.Errorf("view = %+v, want a state and no worker_error", v)
			}
			if !strings.Contains(v.WorkerError, tt.wantWorkerError) {
				t.Errorf("worker_error = %q, want it to contain %q", v.WorkerError, tt.wantWorkerError)
			}
		})
	}
}

// TestOtherUsersConversation checks that another user's conversation is as
// unknown as a missing one on every endpoint, and that the worker is never
// asked about it.
func TestOtherUsersConversation(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.insertConversation("bobs", otherUser, env)
	endpoints := map[string]struct {
		method, path, body string
	}{
		"get":       {http.MethodGet, "/api/conversations/%s", ""},
		"send":      {http.MethodPost, "/api/conversations/%s/messages", `{"text":"hi"}`},
		"interrupt": {http.MethodPost, "/api/conversations/%s/interrupt", ""},
		"stream":    {http.MethodGet, "/api/conversations/%s/stream", ""},
	}
	for name, ep := range endpoints {
		t.Run(name, func(t *testing.T) {
			resp, body := h.do(ep.method, strings.Replace(ep.path, "%s", "bobs", 1), ep.body, nil)
			bobs := wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound)
			resp, body = h.do(ep.method, strings.Replace(ep.path, "%s", "nobody", 1), ep.body, nil)
			missing := wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound)
			if strings.Replace(bobs, "bobs", "nobody", 1) != missing {
				t.Errorf("another user's conversation answers %q, a missing one %q", bobs, missing)
			}
		})
	}
	h.wantNoWorkerRequests(t, "")
}

func TestBadPathID(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, p := range []string{
		"/api/conversations/-x", "/api/conversations/a%2Fb/messages",
		"/api/conversations/" + strings.Repeat("a", 129) + "/interrupt", "/api/conversations/a%20b/stream",
	} {
		method := http.MethodGet
		if strings.HasSuffix(p, "/messages") || strings.HasSuffix(p, "/interrupt") {
			method = http.MethodPost
		}
		resp, body := h.do(method, p, `{"text":"hi"}`, nil)
		wantError(t, resp, body, http.StatusBadRequest, contract.CodeInvalidID)
	}
}

func TestSend(t *testing.T) {
	tests := map[string]struct {
		body       string
		wantStatus int
		wantCode   string // for errors
		wantText   string
		wantID     string // "" with a 2xx: a generated id
	}{
		"generated client message id": {body: `{"text":"hi"}`, wantStatus: http.StatusAccepted, wantText: "hi"},
		"given client message id":     {body: `{"text":"hi","client_message_id":"m1"}`, wantStatus: http.StatusAccepted, wantText: "hi", wantID: "m1"},
		"text at the limit": {
			body:       `{"text":"` + strings.Repeat("x", contract.MaxMessageText) + `"}`,
			wantStatus: http.StatusAccepted, wantText: strings.Repeat("x", contract.MaxMessageText),
		},
		"missing text":    {body: `{"client_message_id":"m1"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"empty text":      {body: `{"text":""}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"blank text":      {body: `{"text":" \n\t"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"no body":         {body: ``, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"unknown field":   {body: `{"text":"hi","clientMessageId":"m1"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"bad message id":  {body: `{"text":"hi","client_message_id":"m/1"}`, wantStatus: http.StatusBadRequest, wantCode: contract.CodeInvalidID},
		"text over limit": {body: `{"text":"` + strings.Repeat("x", contract.MaxMessageText+1) + `"}`, wantStatus: http.StatusRequestEntityTooLarge, wantCode: contract.CodeTooLarge},
		"body over 1 MiB": {body: `{"text":"` + strings.Repeat("x", 1<<20) + `"}`, wantStatus: http.StatusRequestEntityTooLarge, wantCode: contract.CodeTooLarge},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			h := demoHarness(t)
			resp, body := h.do(http.MethodPost, "/api/conversations/demo/messages", tt.body, nil)
			if tt.wantCode != "" {
				wantError(t, resp, body, tt.wantStatus, tt.wantCode)
				h.wantNoWorkerRequests(t, "a refused message")
				return
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			sends := h.worker.Sends()
			if len(sends) != 1 {
				t.Fatalf("worker sends = %d, want 1", len(sends))
			}
			sent := sends[0]
			if sent.Text != tt.wantText {
				t.Errorf("the worker got text of %d bytes, want %d", len(sent.Text), len(tt.wantText))
			}
			if tt.wantID != "" && sent.ClientMessageID != tt.wantID {
				t.Errorf("client_message_id = %q, want %q passed through", sent.ClientMessageID, tt.wantID)
			}
			if tt.wantID == "" && (!strings.HasPrefix(sent.ClientMessageID, "m_") || contract.ValidateID("client message id", sent.ClientMessageID) != nil) {
				t.Errorf("generated client_message_id %q is not a valid m_ id", sent.ClientMessageID)
			}
			var got contract.SendMessageResponse
			decodeJSON(t, body, &got)
			want := contract.SendMessageResponse{ConversationID: "demo", ClientMessageID: sent.ClientMessageID, TurnID: "t_1", Seq: 3}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSendRetryIsDuplicate(t *testing.T) {
	h := demoHarness(t)
	for i, want := range []struct {
		status int
		dup    bool
	}{{http.StatusAccepted, false}, {http.StatusOK, true}} {
		resp, body := h.do(http.MethodPost, "/api/conversations/demo/messages", `{"text":"hi","client_message_id":"m1"}`, nil)
		var got contract.SendMessageResponse
		decodeJSON(t, body, &got)
		if resp.StatusCode != want.status || got.Duplicate != want.dup {
			t.Errorf("call %d: %d duplicate=%v, want %d duplicate=%v", i, resp.StatusCode, got.Duplicate, want.status, want.dup)
		}
	}
}

func TestInterrupt(t *testing.T) {
	h := demoHarness(t)
	resp, body := h.do(http.MethodPost, "/api/conversations/demo/interrupt", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d: %s", resp.StatusCode, body)
	}
	var got contract.InterruptResponse
	decodeJSON(t, body, &got)
	if diff := cmp.Diff(contract.InterruptResponse{ConversationID: "demo", TurnID: "t_1", Interrupted: true}, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

// TestWorkerFailures checks what the browser sees when the worker refuses a
// command or cannot be reached.
func TestWorkerFailures(t *testing.T) {
	answer := func(status int, body string) func(http.ResponseWriter, *http.Request) bool {
		return func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			w.Write([]byte(body))
			return true
		}
	}
	contractError := func(status int, code, msg string) func(http.ResponseWriter, *http.Request) bool {
		return func(w http.ResponseWriter, r *http.Request) bool {
			httpapi.WriteError(w, status, code, msg)
			return true
		}
	}
	tests := map[string]struct {
		command     func(http.ResponseWriter, *http.Request) bool
		unreachable bool
		path        string // default: send
		wantStatus  int
		wantCode    string
		wantMsg     string // a substring of the browser's message
		hiddenMsg   string // must not reach the browser
		// wantRetryAfter is the Retry-After the browser must see.
		wantRetryAfter string
	}{
		"turn running": {
			command:    contractError(http.StatusConflict, contract.CodeTurnRunning, "a turn is running"),
			wantStatus: http.StatusConflict, wantCode: contract.CodeTurnRunning, wantMsg: "a turn is running",
		},
		"shutting down": {
			command: func(w http.ResponseWriter, r *http.Request) bool {
				w.Header().Set("Retry-After", "5")
				httpapi.WriteError(w, http.StatusServiceUnavailable, contract.CodeShuttingDown, "the worker is shutting down")
				return true
			},
			wantStatus: http.StatusServiceUnavailable, wantCode: contract.CodeShuttingDown, wantMsg: "shutting down", wantRetryAfter: "5",
		},
		"worker refuses our signature": {
			command:    contractError(http.StatusUnauthorized, contract.CodeUnauthorized, "signature expired at the worker"),
			wantStatus: http.StatusBadGateway, wantCode: contract.CodeUnavailable, wantMsg: "credentials", hiddenMsg: "signature expired",
		},
		"worker answers garbage": {
			command:    answer(http.StatusInternalServerError, "<html>oops</html>"),
			wantStatus: http.StatusBadGateway, wantCode: contract.CodeUnavailable, hiddenMsg: "oops",
		},
		"worker answers malformed success": {
			command:    answer(http.StatusAccepted, `{"turn_id":`),
			wantStatus: http.StatusBadGateway, wantCode: contract.CodeUnavailable,
		},
		"worker unreachable": {
			unreachable: true,
			wantStatus:  http.StatusBadGateway, wantCode: contract.CodeUnavailable, wantMsg: "unreachable",
		},
		"interrupt, worker unreachable": {
			unreachable: true, path: "/api/conversations/demo/interrupt",
			wantStatus: http.StatusBadGateway, wantCode: contract.CodeUnavailable, wantMsg: "unreachable",
		},
		"interrupt, worker refuses our signature": {
			command: contractError(http.StatusUnauthorized, contract.CodeUnauthorized, "bad"),
			path:    "/api/conversations/demo/interrupt", wantStatus: http.StatusBadGateway, wantCode: contract.CodeUnavailable,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{worker: fakeOptions{command: tt.command}})
			h.insertConversation("demo", user, env)
			if tt.unreachable {
				h.setWorkerURL(closedURL(t))
			}
			path := tt.path
			if path == "" {
				path = "/api/conversations/demo/messages"
			}
			resp, body := h.do(http.MethodPost, path, `{"text":"hi"}`, nil)
			msg := wantError(t, resp, body, tt.wantStatus, tt.wantCode)
			if got := resp.Header.Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetryAfter)
			}
			if !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", msg, tt.wantMsg)
			}
			if tt.hiddenMsg != "" && bytes.Contains(body, []byte(tt.hiddenMsg)) {
				t.Errorf("the browser sees the worker's %q: %s", tt.hiddenMsg, body)
			}
		})
	}
}

func TestWebAPIWithoutLocalUser(t *testing.T) {
	h := newHarness(t, harnessOptions{noLocalUser: true})
	h.insertConversation("demo", user, env)
	requests := map[string]struct{ method, path, body string }{
		"create":           {http.MethodPost, "/api/conversations", `{"id":"x"}`},
		"create, no body":  {http.MethodPost, "/api/conversations", ""},
		"list":             {http.MethodGet, "/api/conversations", ""},
		"get":              {http.MethodGet, "/api/conversations/demo", ""},
		"get, bad id":      {http.MethodGet, "/api/conversations/-bad", ""},
		"get, missing":     {http.MethodGet, "/api/conversations/nobody", ""},
		"send":             {http.MethodPost, "/api/conversations/demo/messages", `{"text":"hi"}`},
		"interrupt":        {http.MethodPost, "/api/conversations/demo/interrupt", ""},
		"stream":           {http.MethodGet, "/api/conversations/demo/stream", ""},
		"stream, replayed": {http.MethodGet, "/api/conversations/demo/stream?after=3", ""},
	}
	var first []byte
	for name, rq := range requests {
		t.Run(name, func(t *testing.T) {
			resp, body := h.do(rq.method, rq.path, rq.body, nil)
			wantError(t, resp, body, http.StatusUnauthorized, contract.CodeUnauthorized)
			if first == nil {
				first = body
			} else if !bytes.Equal(first, body) {
				t.Errorf("401 bodies differ: %s vs %s", first, body)
			}
		})
	}
	h.wantNoWorkerRequests(t, "")
	if _, err := h.store.GetConversation(t.Context(), "x"); err == nil {
		t.Error("a refused create stored a conversation")
	}
}

// TestHistoryBadQuery: the history endpoint refuses a bad page request with
// a JSON 400 before it asks the worker anything.
func TestHistoryBadQuery(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	before := h.worker.Requests()
	for _, q := range []string{
		"?limit=0", "?limit=1001", "?limit=-1", "?limit=x", "?limit=", "?before=0", "?before=-5", "?before=1e3",
		"?before=", "?after=3", "?limit=10&limit=20", "?before=9223372036854775808",
	} {
		resp, body := h.do(http.MethodGet, "/api/conversations/c1/events"+q, "", nil)
		wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
	}
	resp, body := h.do(http.MethodGet, "/api/conversations/-bad/events", "", nil)
	wantError(t, resp, body, http.StatusBadRequest, contract.CodeInvalidID)
	resp, body = h.do(http.MethodGet, "/api/conversations/nosuch/events", "", nil)
	wantError(t, resp, body, http.StatusNotFound, contract.CodeNotFound)
	resp, body = h.do(http.MethodPost, "/api/conversations/c1/events", "{}", nil)
	wantError(t, resp, body, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)
	if n := h.worker.Requests(); n != before {
		t.Errorf("bad requests reached the worker %d times", n-before)
	}
}
