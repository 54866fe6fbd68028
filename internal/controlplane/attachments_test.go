package controlplane_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

// attachWorker answers the attachments command, recording what reached it.
type attachWorker struct {
	mu  sync.Mutex
	got []string // "NAME:BODY", guarded by mu
}

func (a *attachWorker) command(w http.ResponseWriter, r *http.Request) bool {
	if !strings.HasSuffix(r.URL.Path, "/attachments") {
		return false
	}
	body, _ := io.ReadAll(r.Body)
	name := r.URL.Query().Get("name")
	a.mu.Lock()
	a.got = append(a.got, name+":"+string(body))
	a.mu.Unlock()
	if r.Header.Get("Content-Type") != "application/octet-stream" {
		httpapi.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, "wrong type")
		return true
	}
	httpapi.WriteJSON(w, http.StatusCreated, contract.Attachment{Path: "attachments/" + name, Size: int64(len(body))})
	return true
}

func (a *attachWorker) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.got...)
}

func octet() http.Header {
	return http.Header{"Content-Type": {"application/octet-stream"}}
}

func TestAttach(t *testing.T) {
	aw := &attachWorker{}
	h := newHarness(t, harnessOptions{worker: fakeOptions{command: aw.command}})
	h.insertConversation("c1", user, env)
	resp, body := h.do(http.MethodPost, "/api/conversations/c1/attachments?name="+url.QueryEscape("my log.txt"), "line\n", octet())
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var a contract.Attachment
	decodeJSON(t, body, &a)
	if a != (contract.Attachment{Path: "attachments/my log.txt", Size: 5}) {
		t.Errorf("answered %+v", a)
	}
	if got := aw.calls(); len(got) != 1 || got[0] != "my log.txt:line\n" {
		t.Errorf("the worker got %q", got)
	}

	// The send request carries the attachments' paths to the worker.
	resp, body = h.do(http.MethodPost, "/api/conversations/c1/messages", `{"text":"see the log","attachments":["attachments/my log.txt"]}`, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %d %s", resp.StatusCode, body)
	}
	if s := h.worker.Sends(); len(s) != 1 || len(s[0].Attachments) != 1 || s[0].Attachments[0] != "attachments/my log.txt" {
		t.Errorf("the worker got %+v", s)
	}
}

func TestAttachBadInput(t *testing.T) {
	aw := &attachWorker{}
	h := newHarness(t, harnessOptions{worker: fakeOptions{command: aw.command}})
	h.insertConversation("c1", user, env)
	h.insertConversation("bobs", otherUser, env)
	big := strings.Repeat("x", contract.MaxAttachmentBytes+1)
	for name, tc := range map[string]struct {
		path, body string
		header     http.Header
		want       refusal
	}{
		"no name":           {"/api/conversations/c1/attachments", "x", octet(), badRequest},
		"traversal":         {"/api/conversations/c1/attachments?name=..%2F..%2Fetc%2Fpasswd", "x", octet(), badRequest},
		"dot dot":           {"/api/conversations/c1/attachments?name=..", "x", octet(), badRequest},
		"backslash":         {"/api/conversations/c1/attachments?name=..%5Cx", "x", octet(), badRequest},
		"NUL":               {"/api/conversations/c1/attachments?name=a%00b", "x", octet(), badRequest},
		"control character": {"/api/conversations/c1/attachments?name=a%1Bb", "x", octet(), badRequest},
		"hidden":            {"/api/conversations/c1/attachments?name=.ssh", "x", octet(), badRequest},
		"too long a name":   {"/api/conversations/c1/attachments?name=" + strings.Repeat("a", contract.MaxAttachmentName+1), "x", octet(), badRequest},
		"name twice":        {"/api/conversations/c1/attachments?name=a&name=b", "x", octet(), badRequest},
		"a path parameter":  {"/api/conversations/c1/attachments?path=a", "x", octet(), badRequest},
		"as JSON":           {"/api/conversations/c1/attachments?name=a.txt", `{"x":1}`, nil, refusal{http.StatusUnsupportedMediaType, contract.CodeBadRequest}},
		"too large":         {"/api/conversations/c1/attachments?name=a.txt", big, octet(), refusal{http.StatusRequestEntityTooLarge, contract.CodeTooLarge}},
		"another's":         {"/api/conversations/bobs/attachments?name=a.txt", "x", octet(), notFound},
		"no conversation":   {"/api/conversations/nobody/attachments?name=a.txt", "x", octet(), notFound},
		"bad id":            {"/api/conversations/-x/attachments?name=a.txt", "x", octet(), invalidID},
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := h.do(http.MethodPost, tc.path, tc.body, tc.header)
			wantError(t, resp, body, tc.want.status, tc.want.code)
		})
	}
	if got := aw.calls(); len(got) != 0 {
		t.Errorf("refused uploads reached the worker: %d of them", len(got))
	}
	resp, body := h.do(http.MethodGet, "/api/conversations/c1/attachments?name=a.txt", "", nil)
	wantError(t, resp, body, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)

	// A send naming what is not an attachment path never reaches the worker.
	for _, p := range []string{"../x", "attachments/../../x", "src/main.go", "attachments/.env", "/etc/passwd"} {
		resp, body := h.do(http.MethodPost, "/api/conversations/c1/messages", `{"text":"hi","attachments":["`+p+`"]}`, nil)
		wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
	}
	many := `{"text":"hi","attachments":[` + strings.Repeat(`"attachments/a",`, contract.MaxAttachments) + `"attachments/b"]}`
	resp, body = h.do(http.MethodPost, "/api/conversations/c1/messages", many, nil)
	wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
	if s := h.worker.Sends(); len(s) != 0 {
		t.Errorf("refused sends reached the worker: %+v", s)
	}
}
