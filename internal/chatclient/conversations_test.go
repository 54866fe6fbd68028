package chatclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
)

// testCtx bounds a test that would otherwise hang on a bug.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://h", "http://", "http://h/?q=1", "http://h/#f", "http://u:p@h/"} {
		if _, err := New(u, nil); err == nil {
			t.Errorf("New(%q) = nil error", u)
		}
	}
	if _, err := New("http://h", &Options{Token: "a\nb"}); err == nil {
		t.Error("New with a token containing a newline succeeded")
	}
	c, err := New("http://h:1/prefix/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.conversationURL("c1", "/stream"); got != "http://h:1/prefix/api/conversations/c1/stream" {
		t.Errorf("URL = %q", got)
	}
}

func TestConversations(t *testing.T) {
	ctx := testCtx(t)
	f := newFakeCP(t)
	c := f.client(t, nil)

	got, err := c.CreateConversation(ctx, "c1", "first")
	if err != nil {
		t.Fatal(err)
	}
	want := Conversation{ID: "c1", Title: "first", CreatedAt: fakeTime, Created: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("create (-want +got):\n%s", diff)
	}
	got, err = c.CreateConversation(ctx, "c1", "ignored")
	if err != nil {
		t.Fatal(err)
	}
	want.Created = false
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("create again (-want +got):\n%s", diff)
	}
	if got, err := c.CreateConversation(ctx, "", ""); err != nil || got.ID != "c_generated" || !got.Created {
		t.Errorf("create without id = %+v, %v", got, err)
	}

	got, err = c.GetConversation(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	want.State = &contract.SessionState{ConversationID: "c1", Status: contract.StatusIdle, CreatedAt: fakeTime, Harness: "native"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("get (-want +got):\n%s", diff)
	}

	_, err = c.GetConversation(ctx, "nope")
	var ae *APIError
	if !errors.As(err, &ae) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("get unknown: err = %v, want *APIError matching ErrNotFound", err)
	}
	if diff := cmp.Diff(&APIError{Status: 404, Code: contract.CodeNotFound, Message: "no such conversation"}, ae); diff != "" {
		t.Errorf("APIError (-want +got):\n%s", diff)
	}
}

func TestInvalidIDsSendNothing(t *testing.T) {
	ctx := testCtx(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("unexpected request %s %s", r.Method, r.URL)
	}))
	defer srv.Close()
	c, err := New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(id string) error{
		"create":    func(id string) error { _, err := c.CreateConversation(ctx, id, ""); return err },
		"get":       func(id string) error { _, err := c.GetConversation(ctx, id); return err },
		"send":      func(id string) error { _, err := c.Send(ctx, id, "hi"); return err },
		"interrupt": func(id string) error { _, err := c.Interrupt(ctx, id); return err },
		"stream": func(id string) error {
			return c.Stream(ctx, id, 0, func(contract.Event) error { return nil })
		},
	}
	for name, call := range calls {
		for _, id := range []string{"../x", "a/b", "a.b", "_a", strings.Repeat("a", 129), "a%2F"} {
			if err := call(id); !errors.Is(err, contract.ErrInvalidID) {
				t.Errorf("%s(%q): err = %v, want ErrInvalidID", name, id, err)
			}
		}
	}
}

func TestBearerToken(t *testing.T) {
	ctx := testCtx(t)
	f := newFakeCP(t)
	f.token = "s3cret"
	if _, err := f.client(t, nil).CreateConversation(ctx, "c1", ""); !errors.As(err, new(*APIError)) || err.(*APIError).Status != 401 {
		t.Errorf("without token: err = %v, want 401", err)
	}
	if _, err := f.client(t, &Options{Token: "s3cret"}).CreateConversation(ctx, "c1", ""); err != nil {
		t.Errorf("with token: %v", err)
	}
}

func TestSendAndInterrupt(t *testing.T) {
	ctx := testCtx(t)
	f := newFakeCP(t)
	f.manual = true
	f.addConv("c1", 0)
	c := f.client(t, nil)

	resp, err := c.Send(ctx, "c1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.ClientMessageID, "m_") || contract.ValidateID("client message id", resp.ClientMessageID) != nil {
		t.Errorf("client_message_id %q", resp.ClientMessageID)
	}
	want := contract.SendMessageResponse{ConversationID: "c1", ClientMessageID: resp.ClientMessageID, TurnID: "t_1", Seq: 1}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("send (-want +got):\n%s", diff)
	}

	_, err = c.Send(ctx, "c1", "again")
	if !errors.Is(err, ErrTurnRunning) {
		t.Errorf("send while running: err = %v, want ErrTurnRunning", err)
	}
	f.mu.Lock()
	if got := len(f.sendIDs); got != 2 {
		t.Errorf("409 was retried: %d send requests", got)
	}
	f.mu.Unlock()

	ir, err := c.Interrupt(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(contract.InterruptResponse{ConversationID: "c1", TurnID: "t_1", Interrupted: true}, ir); diff != "" {
		t.Errorf("interrupt (-want +got):\n%s", diff)
	}
	if ir, err = c.Interrupt(ctx, "c1"); err != nil || ir.Interrupted {
		t.Errorf("interrupt when idle = %+v, %v", ir, err)
	}

	if _, err := c.Send(ctx, "c1", ""); err == nil {
		t.Error("empty message was accepted")
	}
	if _, err := c.Send(ctx, "c1", strings.Repeat("x", contract.MaxMessageText+1)); err == nil {
		t.Error("oversized message was accepted")
	}
}

func TestSendRetriesWithSameID(t *testing.T) {
	ctx := testCtx(t)
	f := newFakeWithC1(t)
	f.sendFail = 2
	resp, err := f.client(t, nil).Send(ctx, "c1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []string{resp.ClientMessageID, resp.ClientMessageID, resp.ClientMessageID}
	if diff := cmp.Diff(want, f.sendIDs); diff != "" {
		t.Errorf("client_message_ids sent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"hello"}, f.sentTexts); diff != "" {
		t.Errorf("turns started (-want +got):\n%s", diff)
	}
}

func TestSendRetriesLostAnswer(t *testing.T) {
	// The first attempt reaches the server, which starts the turn, but the
	// connection breaks before the answer: the retry must get that turn.
	ctx := testCtx(t)
	f := newFakeWithC1(t)
	var hijacked atomic.Bool
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		r.RequestURI = ""
		f.srv.Config.Handler.ServeHTTP(rec, r)
		if !hijacked.Swap(true) {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	defer proxy.Close()
	c, err := New(proxy.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	fastRetries(c)
	resp, err := c.Send(ctx, "c1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Duplicate || resp.TurnID != "t_1" {
		t.Errorf("send = %+v, want the duplicate answer of turn t_1", resp)
	}
	f.wantSent(t, "hello")
}

func TestSendGivesUp(t *testing.T) {
	ctx := testCtx(t)
	f := newFakeWithC1(t)
	f.sendFail = 100
	_, err := f.client(t, nil).Send(ctx, "c1", "hello")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("err = %v, want a 503 APIError", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := len(f.sendIDs); got != 4 {
		t.Errorf("%d attempts, want 4", got)
	}
}

// refusingFor answers a send 503 with code and Retry-After: 1 refusals
// times, then accepts it; it counts the sends and keeps their message ids.
func refusingFor(t *testing.T, refusals int, code string) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var ids []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req contract.SendMessageRequest
		json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		ids = append(ids, req.ClientMessageID)
		n := len(ids)
		mu.Unlock()
		if n <= refusals {
			w.Header().Set("Retry-After", "1")
			writeErr(w, http.StatusServiceUnavailable, code, "not now")
			return
		}
		writeJSON(w, http.StatusAccepted, contract.SendMessageResponse{TurnID: "t_1"})
	}))
	t.Cleanup(srv.Close)
	return srv, &ids
}

// A refusal that says when to come back (a replica handing the
// conversation over during a rollout, the worker at its bound) is followed
// for far more than the attempts a failure gets, with one message id.
func TestSendFollowsRetryAfter(t *testing.T) {
	for _, code := range []string{contract.CodeSessionElsewhere, contract.CodeWorkerBusy, contract.CodeShuttingDown} {
		t.Run(code, func(t *testing.T) {
			srv, ids := refusingFor(t, 3*sendAttempts, code)
			c, err := New(srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			fastRetries(c)
			resp, err := c.Send(testCtx(t), "c1", "hello")
			if err != nil || resp.TurnID != "t_1" {
				t.Fatalf("send = %+v, %v", resp, err)
			}
			if len(*ids) != 3*sendAttempts+1 || len(slices.Compact(slices.Clone(*ids))) != 1 {
				t.Errorf("sends %v: want %d with one message id", *ids, 3*sendAttempts+1)
			}
		})
	}
}

// Retry-After is followed only as long as the patience lasts: then the
// refusal is the answer.
func TestSendPatienceEnds(t *testing.T) {
	srv, ids := refusingFor(t, 1000, contract.CodeSessionElsewhere)
	c, err := New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	fastRetries(c)
	c.sendPatience = 0
	_, err = c.Send(testCtx(t), "c1", "hello")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != contract.CodeSessionElsewhere || ae.RetryAfter != time.Second {
		t.Fatalf("err = %#v, want the refusal with its Retry-After", err)
	}
	if len(*ids) != sendAttempts {
		t.Errorf("%d sends once the patience was out, want %d", len(*ids), sendAttempts)
	}
}

func TestRetryAfterParsed(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"1": time.Second, "30": 30 * time.Second, "": 0, "0": 0, "-1": 0, "1.5": 0, "3601": 0,
		"Wed, 21 Oct 2026 07:28:00 GMT": 0, "99999999999999999999": 0,
	} {
		if got := retryAfter(v); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestSendStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		cancel()
		writeErr(w, http.StatusServiceUnavailable, contract.CodeUnavailable, "down")
	}))
	defer srv.Close()
	c, err := New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.sendRetry = backoff.Policy{Base: time.Hour, Max: time.Hour}
	if _, err := c.Send(ctx, "c1", "hello"); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if requests != 1 {
		t.Errorf("%d requests, want 1", requests)
	}
}

func TestAPIErrorDecoding(t *testing.T) {
	tests := map[string]struct {
		status int
		ctype  string
		body   string
		want   *APIError
	}{
		"contract error": {409, "application/json", `{"error":{"code":"turn_running","message":"busy"}}`,
			&APIError{Status: 409, Code: "turn_running", Message: "busy"}},
		"proxy page": {502, "text/html", "<html>bad gateway</html>",
			&APIError{Status: 502, Message: "Bad Gateway"}},
		"empty body": {403, "", "", &APIError{Status: 403, Message: "Forbidden"}},
		"other json": {400, "application/json", `{"message":"x"}`, &APIError{Status: 400, Message: "Bad Request"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.ctype != "" {
					w.Header().Set("Content-Type", tc.ctype)
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := New(srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.GetConversation(testCtx(t), "c1")
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want *APIError", err)
			}
			if diff := cmp.Diff(tc.want, ae); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if got := (&APIError{Status: 409, Code: "turn_running", Message: "busy"}).Error(); got != "chatclient: HTTP 409 turn_running: busy" {
		t.Errorf("Error() = %q", got)
	}
}

func TestResponseBodyLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"id":"` + strings.Repeat("x", maxBody) + `"}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetConversation(testCtx(t), "c1"); !errors.Is(err, errBodyTooLarge) {
		t.Errorf("err = %v, want errBodyTooLarge", err)
	}
}

func TestSendMessageUsesTheCallersID(t *testing.T) {
	ctx := testCtx(t)
	f := newFakeWithC1(t)
	f.sendFail = 1
	c := f.client(t, nil)
	id := NewMessageID()
	resp, err := c.SendMessage(ctx, "c1", contract.SendMessageRequest{ClientMessageID: id, Text: "hello"})
	if err != nil || resp.ClientMessageID != id {
		t.Fatalf("SendMessage = %+v, %v", resp, err)
	}
	f.mu.Lock()
	got := append([]string(nil), f.sendIDs...)
	f.mu.Unlock()
	if diff := cmp.Diff([]string{id, id}, got); diff != "" {
		t.Errorf("client_message_ids sent (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "../x", "-x", strings.Repeat("m", contract.MaxIDLen+1)} {
		if _, err := c.SendMessage(ctx, "c1", contract.SendMessageRequest{ClientMessageID: bad, Text: "hello"}); !errors.Is(err, contract.ErrInvalidID) {
			t.Errorf("SendMessage with id %q = %v, want ErrInvalidID", bad, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sendIDs) != 2 {
		t.Errorf("%d requests, want the bad ids refused before sending", len(f.sendIDs))
	}
}
