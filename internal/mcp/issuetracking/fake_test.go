package issuetracking_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/mcp/issuetracking"
	"github.com/talkide/platform/internal/trust"
)

const (
	tenant = "acme"
	env    = "prod"
	kid    = "c1"
)

var (
	envKey = bytes.Repeat([]byte("e"), 32)
	start  = time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC)
)

// fakeCP is a control-plane that checks the worker's signatures like the
// real one and keeps issues in memory, with the idempotency the contract
// promises. fail, when set, answers a request instead (return false to let
// it through).
type fakeCP struct {
	t        *testing.T
	srv      *httptest.Server
	verifier *trust.Verifier

	mu sync.Mutex
	// guarded by mu
	issues   []contract.Issue // oldest first
	keys     map[string]string
	comments map[string]bool // comment idempotency keys seen
	requests []string        // "METHOD path?query idempotency_key" of every signed request
	creates  []contract.CreateIssueRequest
	fail     func(w http.ResponseWriter, r *http.Request) bool
	n        int
}

func startFakeCP(t *testing.T) *fakeCP {
	t.Helper()
	f := &fakeCP{t: t, keys: map[string]string{}, comments: map[string]bool{}}
	f.verifier = trust.NewVerifier(trust.ToControlPlane, func(te, e, k string) ([]byte, bool) {
		return envKey, te == tenant && e == env && k == kid
	}, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+contract.IssuesPath, f.create)
	mux.HandleFunc("GET "+contract.IssuesPath, f.list)
	mux.HandleFunc("POST "+contract.IssueCommentsPath, f.comment)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if _, err := f.verifier.Verify(r, body); err != nil {
			httpapi.WriteError(w, http.StatusUnauthorized, contract.CodeUnauthorized, "bad signature")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		fail := f.fail
		f.mu.Unlock()
		if fail != nil && fail(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCP) signer() *trust.Signer {
	return &trust.Signer{Direction: trust.ToControlPlane, Tenant: tenant, Env: env, KeyID: kid, Key: envKey}
}

// client returns a Client of f that retries quickly.
func (f *fakeCP) client(hc *http.Client) *issuetracking.Client {
	return issuetracking.NewClient(f.srv.URL, f.signer(), &issuetracking.ClientOptions{HTTPClient: hc, Backoff: time.Millisecond})
}

func (f *fakeCP) setFail(fail func(w http.ResponseWriter, r *http.Request) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

func (f *fakeCP) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func (f *fakeCP) Creates() []contract.CreateIssueRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]contract.CreateIssueRequest(nil), f.creates...)
}

func (f *fakeCP) Issues() []contract.Issue {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]contract.Issue(nil), f.issues...)
}

func (f *fakeCP) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, _ := io.ReadAll(r.Body)
	if err := httpapi.DecodeJSON(body, v); err != nil {
		f.t.Errorf("fake control-plane: %s %s: %v", r.Method, r.URL.Path, err)
		httpapi.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, err.Error())
		return false
	}
	return true
}

func (f *fakeCP) create(w http.ResponseWriter, r *http.Request) {
	var req contract.CreateIssueRequest
	if !f.decode(w, r, &req) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, req)
	if id, ok := f.keys[req.IdempotencyKey]; ok {
		for _, i := range f.issues {
			if i.ID == id {
				httpapi.WriteJSON(w, http.StatusOK, i)
				return
			}
		}
	}
	f.n++
	labels := req.Labels
	if labels == nil {
		labels = []string{}
	}
	i := contract.Issue{
		ID: fmt.Sprintf("iss_%d", f.n), ConversationID: req.ConversationID, TurnID: req.TurnID, Title: req.Title, Body: req.Body,
		Severity: req.Severity, Labels: labels, Status: contract.IssueOpen,
		CreatedAt: start.Add(time.Duration(f.n) * time.Minute), UpdatedAt: start.Add(time.Duration(f.n) * time.Minute),
		Comments: []contract.IssueComment{},
	}
	f.issues = append(f.issues, i)
	f.keys[req.IdempotencyKey] = i.ID
	httpapi.WriteJSON(w, http.StatusCreated, i)
}

func (f *fakeCP) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	conv, status := q.Get("conversation_id"), q.Get("status")
	f.mu.Lock()
	defer f.mu.Unlock()
	out := contract.IssueList{Issues: []contract.Issue{}}
	for k := len(f.issues) - 1; k >= 0; k-- {
		i := f.issues[k]
		if i.ConversationID == conv && (status == "" || status == "all" || status == i.Status) {
			out.Issues = append(out.Issues, i)
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

func (f *fakeCP) comment(w http.ResponseWriter, r *http.Request) {
	var req contract.CommentIssueRequest
	if !f.decode(w, r, &req) {
		return
	}
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, i := range f.issues {
		if i.ID != id || i.ConversationID != req.ConversationID {
			continue
		}
		c := contract.IssueComment{ID: fmt.Sprintf("cmt_%d_%d", k, len(i.Comments)), IssueID: id, TurnID: req.TurnID, Body: req.Body, Status: req.Status, CreatedAt: start}
		if f.comments[req.IdempotencyKey] {
			httpapi.WriteJSON(w, http.StatusOK, c)
			return
		}
		f.comments[req.IdempotencyKey] = true
		f.issues[k].Comments = append(f.issues[k].Comments, c)
		if req.Status != "" {
			f.issues[k].Status = req.Status
		}
		httpapi.WriteJSON(w, http.StatusCreated, c)
		return
	}
	httpapi.WriteError(w, http.StatusNotFound, contract.CodeNotFound, "no issue "+id+" in conversation "+req.ConversationID)
}

// countRequests counts the requests whose line contains sub.
func countRequests(reqs []string, sub string) int {
	n := 0
	for _, r := range reqs {
		if strings.Contains(r, sub) {
			n++
		}
	}
	return n
}
