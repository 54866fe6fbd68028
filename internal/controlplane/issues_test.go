package controlplane_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/trust"
)

// workerCall sends a worker request signed by sg (nil: unsigned) and
// returns the answer with its body read.
func (h *harness) workerCall(sg *trust.Signer, method, path string, body []byte) (*http.Response, []byte) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.url+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if sg != nil {
		sg.Sign(req, body)
	}
	return h.send(req, body)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func issueRequest(key, conversation string) contract.CreateIssueRequest {
	return contract.CreateIssueRequest{
		IdempotencyKey: key, ConversationID: conversation, TurnID: "t_1",
		Title: "Flaky test", Body: "TestFoo fails one run in ten.", Severity: contract.SeverityHigh, Labels: []string{"ci"},
	}
}

// fileIssue files an issue through the worker endpoint and returns it.
func (h *harness) fileIssue(req contract.CreateIssueRequest) contract.Issue {
	h.t.Helper()
	resp, data := h.workerCall(h.reportSigner(env), http.MethodPost, contract.IssuesPath, mustJSON(h.t, req))
	if resp.StatusCode != http.StatusCreated {
		h.t.Fatalf("file issue: status %d: %s", resp.StatusCode, data)
	}
	var got contract.Issue
	decodeJSON(h.t, data, &got)
	return got
}

// wantRetryAnswer checks the answer to a retry: 200, with what the first
// call created.
func wantRetryAnswer[T any](t *testing.T, resp *http.Response, data []byte, want T) {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("retry: status %d: %s", resp.StatusCode, data)
	}
	var again T
	decodeJSON(t, data, &again)
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("retry (-want +got):\n%s", diff)
	}
}

// commentIssue comments through the worker endpoint and returns the answer.
func (h *harness) commentIssue(id string, req contract.CommentIssueRequest) (*http.Response, []byte) {
	h.t.Helper()
	return h.workerCall(h.reportSigner(env), http.MethodPost, strings.Replace(contract.IssueCommentsPath, "{id}", id, 1), mustJSON(h.t, req))
}

func (h *harness) listIssues(query string) (*http.Response, []byte) {
	h.t.Helper()
	return h.workerCall(h.reportSigner(env), http.MethodGet, contract.IssuesPath+"?"+query, nil)
}

func TestIssueCreate(t *testing.T) {
	h := demoHarness(t)

	req := issueRequest("demo/issue-toolu_1", "demo")
	req.Title = "  Flaky test  "
	req.Labels = []string{"ci", " flaky ", "ci"}
	body := mustJSON(t, req)
	resp, data := h.workerCall(h.reportSigner(env), http.MethodPost, contract.IssuesPath, body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	var got contract.Issue
	decodeJSON(t, data, &got)
	want := contract.Issue{
		ID: got.ID, ConversationID: "demo", TurnID: "t_1", Title: "Flaky test", Body: req.Body,
		Severity: "high", Labels: []string{"ci", "flaky"}, Status: "open", CreatedAt: start, UpdatedAt: start,
		Comments: []contract.IssueComment{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("issue (-want +got):\n%s", diff)
	}
	if err := contract.ValidateID("issue id", got.ID); err != nil || !strings.HasPrefix(got.ID, "iss_") {
		t.Errorf("issue id %q: %v", got.ID, err)
	}

	// A retry, after a lost answer, with a new signature and even another
	// title, files nothing and answers the first issue.
	h.clock.Advance(time.Second)
	req.Title = "Something else"
	resp, data = h.workerCall(h.reportSigner(env), http.MethodPost, contract.IssuesPath, mustJSON(t, req))
	wantRetryAnswer(t, resp, data, want)

	stored, err := h.store.ListIssues(t.Context(), "demo", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1 || stored[0].UserID != user || stored[0].Tenant != tenant || stored[0].Env != env {
		t.Errorf("stored %+v, want one issue of %s in %s/%s", stored, user, tenant, env)
	}
}

func TestIssueCreateRefused(t *testing.T) {
	valid := func(mod func(*contract.CreateIssueRequest)) func(*testing.T) []byte {
		return func(t *testing.T) []byte {
			r := issueRequest("demo/k", "demo")
			mod(&r)
			return mustJSON(t, r)
		}
	}
	signer := func(h *harness) *trust.Signer { return h.reportSigner(env) }
	type call struct {
		body   func(*testing.T) []byte
		signer func(*harness) *trust.Signer // nil: the env's own
	}
	// Each group of calls is refused with one status and code.
	tests := []struct {
		wantStatus int
		wantCode   string
		calls      map[string]call
	}{
		{http.StatusUnauthorized, contract.CodeUnauthorized, map[string]call{
			"unsigned": {signer: func(*harness) *trust.Signer { return nil }},
			"direction to worker": {
				signer: func(h *harness) *trust.Signer {
					sg := h.reportSigner(env)
					sg.Direction = trust.ToWorker
					return sg
				},
			},
			"wrong key": {
				signer: func(h *harness) *trust.Signer {
					sg := h.reportSigner(env)
					sg.Key = bytes.Repeat([]byte("w"), 32)
					return sg
				},
			},
			"env not in the store": {signer: func(h *harness) *trust.Signer { return h.reportSigner("ghost") }},
		}},
		{http.StatusForbidden, contract.CodeForbidden, map[string]call{
			"signed by the other env":    {signer: func(h *harness) *trust.Signer { return h.reportSigner(otherEnv) }},
			"another env's conversation": {body: valid(func(r *contract.CreateIssueRequest) { r.ConversationID = "elsewhere" })},
			"unknown conversation":       {body: valid(func(r *contract.CreateIssueRequest) { r.ConversationID = "nobody" })},
		}},
		{http.StatusBadRequest, contract.CodeInvalidID, map[string]call{
			"bad conversation id": {body: valid(func(r *contract.CreateIssueRequest) { r.ConversationID = "../demo" })},
			"bad turn id":         {body: valid(func(r *contract.CreateIssueRequest) { r.TurnID = "t 1" })},
		}},
		{http.StatusBadRequest, contract.CodeBadRequest, map[string]call{
			"no idempotency key":       {body: valid(func(r *contract.CreateIssueRequest) { r.IdempotencyKey = "" })},
			"idempotency key too long": {body: valid(func(r *contract.CreateIssueRequest) { r.IdempotencyKey = strings.Repeat("k", 301) })},
			"blank title":              {body: valid(func(r *contract.CreateIssueRequest) { r.Title = " \t" })},
			"title of 201 characters":  {body: valid(func(r *contract.CreateIssueRequest) { r.Title = strings.Repeat("é", 201) })},
			"title of two lines":       {body: valid(func(r *contract.CreateIssueRequest) { r.Title = "one\ntwo" })},
			"blank body":               {body: valid(func(r *contract.CreateIssueRequest) { r.Body = "\n" })},
			"body over 20 KiB":         {body: valid(func(r *contract.CreateIssueRequest) { r.Body = strings.Repeat("b", contract.MaxIssueBody+1) })},
			"unknown severity":         {body: valid(func(r *contract.CreateIssueRequest) { r.Severity = "urgent" })},
			"no severity":              {body: valid(func(r *contract.CreateIssueRequest) { r.Severity = "" })},
			"11 labels": {
				body: valid(func(r *contract.CreateIssueRequest) {
					r.Labels = nil
					for i := range 11 {
						r.Labels = append(r.Labels, fmt.Sprint("l", i))
					}
				}),
			},
			"label of 51 characters": {body: valid(func(r *contract.CreateIssueRequest) { r.Labels = []string{strings.Repeat("ü", 51)} })},
			"empty label":            {body: valid(func(r *contract.CreateIssueRequest) { r.Labels = []string{"ci", " "} })},
			"unknown field": {
				body: func(*testing.T) []byte {
					return []byte(`{"idempotency_key":"k","conversation_id":"demo","title":"t","body":"b","severity":"low","priority":1}`)
				},
			},
		}},
		{http.StatusRequestEntityTooLarge, contract.CodeTooLarge, map[string]call{
			"body over 64 KiB": {body: func(*testing.T) []byte { return bytes.Repeat([]byte(" "), contract.MaxIssueRequest+1) }},
		}},
	}
	for _, g := range tests {
		for name, tt := range g.calls {
			t.Run(name, func(t *testing.T) {
				h := demoHarness(t)
				h.insertConversation("elsewhere", user, otherEnv)
				body := mustJSON(t, issueRequest("demo/k", "demo"))
				if tt.body != nil {
					body = tt.body(t)
				}
				sg := signer
				if tt.signer != nil {
					sg = tt.signer
				}
				resp, data := h.workerCall(sg(h), http.MethodPost, contract.IssuesPath, body)
				wantError(t, resp, data, g.wantStatus, g.wantCode)
				for _, c := range []string{"demo", "elsewhere"} {
					if got, err := h.store.ListIssues(t.Context(), c, "", 0); err != nil || len(got) != 0 {
						t.Errorf("stored for %s: %v, %v; want nothing", c, got, err)
					}
				}
			})
		}
	}
}

// TestIssueCreateLimits files what is just within every limit.
func TestIssueCreateLimits(t *testing.T) {
	h := demoHarness(t)
	req := issueRequest("demo/k", "demo")
	req.Title = strings.Repeat("é", contract.MaxIssueTitle)
	req.Body = strings.Repeat("b", contract.MaxIssueBody)
	req.Severity = contract.SeverityCritical
	req.Labels = nil
	for i := range contract.MaxIssueLabels {
		req.Labels = append(req.Labels, fmt.Sprintf("%02d", i)+strings.Repeat("ü", contract.MaxIssueLabel-2))
	}
	got := h.fileIssue(req)
	if got.Title != req.Title || got.Body != req.Body || len(got.Labels) != contract.MaxIssueLabels {
		t.Errorf("issue at the limits changed: title %d bytes, body %d bytes, %d labels", len(got.Title), len(got.Body), len(got.Labels))
	}
}

func TestIssueKeyOfAnotherConversation(t *testing.T) {
	h := demoHarness(t)
	h.insertConversation("other", user, env)
	h.fileIssue(issueRequest("shared-key", "demo"))
	resp, data := h.workerCall(h.reportSigner(env), http.MethodPost, contract.IssuesPath, mustJSON(t, issueRequest("shared-key", "other")))
	wantError(t, resp, data, http.StatusConflict, contract.CodeConflict)
}

func TestIssueReplayRefused(t *testing.T) {
	h := demoHarness(t)
	body := mustJSON(t, issueRequest("demo/k", "demo"))
	req := h.reportRequest(nil, body)
	req.URL.Path = contract.IssuesPath
	h.reportSigner(env).Sign(req, body)
	resp, data := h.send(req, body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("first: status %d: %s", resp.StatusCode, data)
	}
	replay := req.Clone(t.Context())
	resp, data = h.send(replay, body)
	wantError(t, resp, data, http.StatusUnauthorized, contract.CodeUnauthorized)
}

func TestIssueList(t *testing.T) {
	h := demoHarness(t)
	h.insertConversation("other", user, env)
	h.insertConversation("elsewhere", user, otherEnv)
	var ids []string
	for i := range 3 {
		h.clock.Advance(time.Second)
		ids = append(ids, h.fileIssue(issueRequest(fmt.Sprint("demo/", i), "demo")).ID)
	}
	h.fileIssue(issueRequest("other/0", "other"))
	if resp, data := h.commentIssue(ids[0], contract.CommentIssueRequest{IdempotencyKey: "c1", ConversationID: "demo", Body: "fixed", Status: contract.IssueClosed}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("comment: %d %s", resp.StatusCode, data)
	}

	tests := map[string]struct {
		query string
		want  []string
	}{
		"default": {"conversation_id=demo", []string{ids[2], ids[1], ids[0]}},
		"all":     {"conversation_id=demo&status=all", []string{ids[2], ids[1], ids[0]}},
		"open":    {"conversation_id=demo&status=open", []string{ids[2], ids[1]}},
		"closed":  {"conversation_id=demo&status=closed", []string{ids[0]}},
		"limit":   {"conversation_id=demo&limit=1", []string{ids[2]}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			resp, data := h.listIssues(tt.query)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			var got contract.IssueList
			decodeJSON(t, data, &got)
			var gotIDs []string
			for _, i := range got.Issues {
				gotIDs = append(gotIDs, i.ID)
				if i.ConversationID != "demo" {
					t.Errorf("issue %s of conversation %s listed", i.ID, i.ConversationID)
				}
				if wantComments := map[bool]int{true: 1}[i.ID == ids[0]]; len(i.Comments) != wantComments {
					t.Errorf("issue %s has %d comments, want %d", i.ID, len(i.Comments), wantComments)
				}
			}
			if diff := cmp.Diff(tt.want, gotIDs); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}

	refused := map[string]struct {
		query           string
		signer          *trust.Signer
		wantStatus      int
		wantCode        string
		changeAfterSign bool
	}{
		"another env's conversation": {query: "conversation_id=elsewhere", wantStatus: http.StatusForbidden, wantCode: contract.CodeForbidden},
		"unknown conversation":       {query: "conversation_id=nobody", wantStatus: http.StatusForbidden, wantCode: contract.CodeForbidden},
		"no conversation":            {query: "status=open", wantStatus: http.StatusBadRequest, wantCode: contract.CodeInvalidID},
		"bad status":                 {query: "conversation_id=demo&status=done", wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"limit 0":                    {query: "conversation_id=demo&limit=0", wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"limit 101":                  {query: "conversation_id=demo&limit=101", wantStatus: http.StatusBadRequest, wantCode: contract.CodeBadRequest},
		"query changed after signing": {
			query: "conversation_id=demo", changeAfterSign: true,
			wantStatus: http.StatusUnauthorized, wantCode: contract.CodeUnauthorized,
		},
		"signed by the other env": {
			query: "conversation_id=demo", signer: h.reportSigner(otherEnv),
			wantStatus: http.StatusForbidden, wantCode: contract.CodeForbidden,
		},
	}
	for name, tt := range refused {
		t.Run(name, func(t *testing.T) {
			sg := tt.signer
			if sg == nil {
				sg = h.reportSigner(env)
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+contract.IssuesPath+"?"+tt.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			sg.Sign(req, nil)
			if tt.changeAfterSign {
				req.URL.RawQuery = "conversation_id=other"
			}
			resp, data := h.send(req, nil)
			wantError(t, resp, data, tt.wantStatus, tt.wantCode)
		})
	}
}

func TestIssueComment(t *testing.T) {
	h := demoHarness(t)
	h.insertConversation("other", user, env)
	h.insertConversation("elsewhere", user, otherEnv)
	iss := h.fileIssue(issueRequest("demo/issue", "demo"))
	otherIss := h.fileIssue(issueRequest("other/issue", "other"))

	h.clock.Advance(time.Minute)
	req := contract.CommentIssueRequest{IdempotencyKey: "demo/comment-1", ConversationID: "demo", TurnID: "t_2", Body: "Seen again on main.", Status: contract.IssueClosed}
	resp, data := h.commentIssue(iss.ID, req)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	var got contract.IssueComment
	decodeJSON(t, data, &got)
	want := contract.IssueComment{ID: got.ID, IssueID: iss.ID, TurnID: "t_2", Body: req.Body, Status: "closed", CreatedAt: start.Add(time.Minute)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("comment (-want +got):\n%s", diff)
	}

	// A retry answers the first comment.
	resp, data = h.commentIssue(iss.ID, req)
	wantRetryAnswer(t, resp, data, want)
	stored, err := h.store.GetIssue(t.Context(), iss.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != contract.IssueClosed || len(stored.Comments) != 1 || !stored.UpdatedAt.Equal(start.Add(time.Minute)) {
		t.Errorf("stored issue: status %s, %d comments, updated %v", stored.Status, len(stored.Comments), stored.UpdatedAt)
	}

	comment := func(mod func(*contract.CommentIssueRequest)) contract.CommentIssueRequest {
		r := contract.CommentIssueRequest{IdempotencyKey: "demo/comment-x", ConversationID: "demo", Body: "more"}
		mod(&r)
		return r
	}
	refused := map[string]struct {
		issue      string
		req        contract.CommentIssueRequest
		wantStatus int
		wantCode   string
	}{
		"issue of another conversation": {otherIss.ID, comment(func(*contract.CommentIssueRequest) {}), http.StatusNotFound, contract.CodeNotFound},
		"unknown issue":                 {"iss_nope", comment(func(*contract.CommentIssueRequest) {}), http.StatusNotFound, contract.CodeNotFound},
		"bad issue id":                  {"iss.x", comment(func(*contract.CommentIssueRequest) {}), http.StatusBadRequest, contract.CodeInvalidID},
		"another env's conversation": {iss.ID, comment(func(r *contract.CommentIssueRequest) { r.ConversationID = "elsewhere" }),
			http.StatusForbidden, contract.CodeForbidden},
		"blank body":             {iss.ID, comment(func(r *contract.CommentIssueRequest) { r.Body = " " }), http.StatusBadRequest, contract.CodeBadRequest},
		"body over 20 KiB":       {iss.ID, comment(func(r *contract.CommentIssueRequest) { r.Body = strings.Repeat("b", contract.MaxIssueBody+1) }), http.StatusBadRequest, contract.CodeBadRequest},
		"unknown status":         {iss.ID, comment(func(r *contract.CommentIssueRequest) { r.Status = "wontfix" }), http.StatusBadRequest, contract.CodeBadRequest},
		"status all":             {iss.ID, comment(func(r *contract.CommentIssueRequest) { r.Status = "all" }), http.StatusBadRequest, contract.CodeBadRequest},
		"no idempotency key":     {iss.ID, comment(func(r *contract.CommentIssueRequest) { r.IdempotencyKey = "" }), http.StatusBadRequest, contract.CodeBadRequest},
		"unknown conversation":   {iss.ID, comment(func(r *contract.CommentIssueRequest) { r.ConversationID = "nobody" }), http.StatusForbidden, contract.CodeForbidden},
		"conversation id absent": {iss.ID, comment(func(r *contract.CommentIssueRequest) { r.ConversationID = "" }), http.StatusBadRequest, contract.CodeInvalidID},
	}
	for name, tt := range refused {
		t.Run(name, func(t *testing.T) {
			resp, data := h.commentIssue(tt.issue, tt.req)
			wantError(t, resp, data, tt.wantStatus, tt.wantCode)
		})
	}
	for _, id := range []string{iss.ID, otherIss.ID} {
		i, err := h.store.GetIssue(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{iss.ID: 1}[id]; len(i.Comments) != want {
			t.Errorf("issue %s has %d comments after the refusals, want %d", id, len(i.Comments), want)
		}
	}

	// Unsigned.
	resp, data = h.workerCall(nil, http.MethodPost, strings.Replace(contract.IssueCommentsPath, "{id}", iss.ID, 1), mustJSON(t, comment(func(*contract.CommentIssueRequest) {})))
	wantError(t, resp, data, http.StatusUnauthorized, contract.CodeUnauthorized)
}

func TestIssueCommentLimit(t *testing.T) {
	h := demoHarness(t)
	iss := h.fileIssue(issueRequest("demo/issue", "demo"))
	for i := range contract.MaxIssueComments {
		if _, _, err := h.store.AddIssueComment(t.Context(), store.IssueComment{
			ID: fmt.Sprint("c", i), IssueID: iss.ID, IdempotencyKey: fmt.Sprint("k", i), Body: "x", CreatedAt: start,
		}); err != nil {
			t.Fatal(err)
		}
	}
	resp, data := h.commentIssue(iss.ID, contract.CommentIssueRequest{IdempotencyKey: "one-more", ConversationID: "demo", Body: "x"})
	wantError(t, resp, data, http.StatusConflict, contract.CodeConflict)
	// A retry of a comment that made it is still answered.
	resp, data = h.commentIssue(iss.ID, contract.CommentIssueRequest{IdempotencyKey: "k99", ConversationID: "demo", Body: "x"})
	if resp.StatusCode != http.StatusOK {
		t.Errorf("retry of the last comment: status %d: %s", resp.StatusCode, data)
	}
}

func TestIssuesThroughTheWebAPI(t *testing.T) {
	h := demoHarness(t)
	h.insertConversation("bobs", otherUser, env)
	iss := h.fileIssue(issueRequest("demo/issue", "demo"))
	h.clock.Advance(time.Second)
	if resp, data := h.commentIssue(iss.ID, contract.CommentIssueRequest{IdempotencyKey: "c", ConversationID: "demo", Body: "A comment."}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("comment: %d %s", resp.StatusCode, data)
	}
	bobs := h.fileIssue(issueRequest("bobs/issue", "bobs"))

	resp, data := h.do(http.MethodGet, "/api/conversations/demo/issues", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	var got contract.IssueList
	decodeJSON(t, data, &got)
	want := contract.IssueList{Issues: []contract.Issue{{
		ID: iss.ID, ConversationID: "demo", TurnID: "t_1", Title: "Flaky test", Body: "TestFoo fails one run in ten.",
		Severity: "high", Labels: []string{"ci"}, Status: "open", CreatedAt: start, UpdatedAt: start.Add(time.Second),
		Comments: []contract.IssueComment{{IssueID: iss.ID, Body: "A comment.", CreatedAt: start.Add(time.Second)}},
	}}}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(contract.IssueComment{}, "ID")); diff != "" {
		t.Errorf("issues (-want +got):\n%s", diff)
	}

	resp, data = h.do(http.MethodGet, "/api/conversations/demo/issues?status=closed", "", nil)
	var closed contract.IssueList
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("closed: status %d: %s", resp.StatusCode, data)
	}
	decodeJSON(t, data, &closed)
	if len(closed.Issues) != 0 {
		t.Errorf("closed issues: %+v, want none", closed.Issues)
	}

	// Another user's conversation is as unknown as a missing one.
	resp, data = h.do(http.MethodGet, "/api/conversations/bobs/issues", "", nil)
	msgBobs := wantError(t, resp, data, http.StatusNotFound, contract.CodeNotFound)
	if strings.Contains(string(data), bobs.ID) {
		t.Errorf("another user's issue leaked: %s", data)
	}
	resp, data = h.do(http.MethodGet, "/api/conversations/nobody/issues", "", nil)
	msgMissing := wantError(t, resp, data, http.StatusNotFound, contract.CodeNotFound)
	if strings.Replace(msgBobs, "bobs", "nobody", 1) != msgMissing {
		t.Errorf("another user's conversation answers %q, a missing one %q", msgBobs, msgMissing)
	}
	resp, data = h.do(http.MethodGet, "/api/conversations/demo/issues?limit=x", "", nil)
	wantError(t, resp, data, http.StatusBadRequest, contract.CodeBadRequest)
	resp, data = h.do(http.MethodGet, "/api/conversations/-x/issues", "", nil)
	wantError(t, resp, data, http.StatusBadRequest, contract.CodeInvalidID)
	resp, data = h.do(http.MethodPost, "/api/conversations/demo/issues", "{}", nil)
	wantError(t, resp, data, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)
	h.wantNoWorkerRequests(t, "")
}

func TestIssueEndpointsMethodNotAllowed(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for path, method := range map[string]string{
		contract.IssuesPath: http.MethodDelete,
		strings.Replace(contract.IssueCommentsPath, "{id}", "iss_1", 1): http.MethodGet,
	} {
		resp, data := h.workerCall(h.reportSigner(env), method, path, nil)
		wantError(t, resp, data, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)
		if resp.Header.Get("Allow") == "" {
			t.Errorf("%s %s: no Allow header", method, path)
		}
	}
}
