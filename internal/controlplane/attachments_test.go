package controlplane_test

import (
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/roundtrip"
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

// uploadCounts counts the uploads refused, by bound (UploadMetrics).
type uploadCounts struct {
	mu sync.Mutex
	n  map[string]int // guarded by mu
}

func (u *uploadCounts) UploadRefused(limit string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n == nil {
		u.n = map[string]int{}
	}
	u.n[limit]++
}

func (u *uploadCounts) get() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.n)
}

// TestAttachRoom holds one upload's bytes (its worker does not answer
// yet) and sends another: beyond the user's share of the room it is
// refused 429, beyond the whole room 503, each unread and with
// Retry-After; once the first is stored, it passes. A worker's own such
// refusal reaches the browser as it was given.
func TestAttachRoom(t *testing.T) {
	for name, tc := range map[string]struct {
		memory, perUser int64
		status          int
		counted         string
	}{
		"the user's share": {memory: 100, perUser: 60, status: http.StatusTooManyRequests, counted: "user"},
		"the whole room":   {memory: 60, perUser: 100, status: http.StatusServiceUnavailable, counted: "total"},
	} {
		t.Run(name, func(t *testing.T) {
			aw := &attachWorker{}
			arrived, proceed := make(chan struct{}), make(chan struct{})
			command := func(w http.ResponseWriter, r *http.Request) bool {
				switch r.URL.Query().Get("name") {
				case "slow.bin":
					close(arrived)
					<-proceed
				case "full.bin":
					w.Header().Set("Retry-After", "1")
					httpapi.WriteError(w, http.StatusServiceUnavailable, contract.CodeTooManyUploads, "the worker holds as many uploaded bytes as it may")
					return true
				}
				return aw.command(w, r)
			}
			counts := &uploadCounts{}
			h := newHarness(t, harnessOptions{worker: fakeOptions{command: command},
				streams: controlplane.Options{UploadMemory: tc.memory, UploadMemoryPerUser: tc.perUser, UploadMetrics: counts}})
			h.insertConversation("c1", user, env)
			attach := func(name string, size int) (*http.Response, []byte) {
				return h.do(http.MethodPost, "/api/conversations/c1/attachments?name="+name, strings.Repeat("x", size), octet())
			}

			req := newRequest(t, http.MethodPost, h.url+"/api/conversations/c1/attachments?name=slow.bin", strings.Repeat("s", 50))
			req.Header.Set("Content-Type", "application/octet-stream")
			first := roundtrip.Status(h.client, req)
			select {
			case <-arrived:
			case <-t.Context().Done():
				t.Fatal("the first upload never reached the worker")
			}

			resp, body := attach("second.txt", 20)
			wantError(t, resp, body, tc.status, contract.CodeTooManyUploads)
			if resp.Header.Get("Retry-After") == "" {
				t.Error("a refusal for want of room says no Retry-After")
			}
			// A small one still fits.
			if resp, body := attach("small.txt", 5); resp.StatusCode != http.StatusCreated {
				t.Errorf("a file that fits: %d %s", resp.StatusCode, body)
			}

			close(proceed)
			if got := <-first; got != http.StatusCreated {
				t.Fatalf("the held upload answered %d", got)
			}
			if resp, body := attach("second.txt", 20); resp.StatusCode != http.StatusCreated {
				t.Fatalf("once the room is back: %d %s", resp.StatusCode, body)
			}
			resp, body = attach("full.bin", 1)
			wantError(t, resp, body, http.StatusServiceUnavailable, contract.CodeTooManyUploads)
			if resp.Header.Get("Retry-After") != "1" {
				t.Errorf("the worker's refusal reached the browser with Retry-After %q", resp.Header.Get("Retry-After"))
			}
			if got, want := counts.get(), map[string]int{tc.counted: 1, "worker": 1}; !maps.Equal(got, want) {
				t.Errorf("refusals counted %v, want %v", got, want)
			}
			if got := aw.calls(); len(got) != 3 {
				t.Errorf("the worker stored %q; want small.txt, slow.bin, second.txt", got)
			}
		})
	}
}
