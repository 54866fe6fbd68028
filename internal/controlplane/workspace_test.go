package controlplane_test

import (
	"mime"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
)

// viewWorker answers the workspace view's worker commands from canned
// answers by path and decoded query: a request the control-plane forwarded
// with another path than the one checked finds none.
type viewWorker struct {
	answers map[string]func() (int, any) // by "PATH?QUERY"
}

func (v *viewWorker) command(w http.ResponseWriter, r *http.Request) bool {
	if !strings.Contains(r.URL.Path, "/workspace/") && !strings.HasSuffix(r.URL.Path, "/tool-output") {
		return false
	}
	q, _ := url.QueryUnescape(r.URL.RawQuery)
	key := r.URL.Path + "?" + q
	answer, ok := v.answers[key]
	if !ok {
		httpapi.WriteError(w, http.StatusNotFound, contract.CodeNotFound, "nothing canned for "+key)
		return true
	}
	status, body := answer()
	if e, ok := body.(contract.ErrorBody); ok {
		httpapi.WriteError(w, status, e.Code, e.Message)
		return true
	}
	httpapi.WriteJSON(w, status, body)
	return true
}

func ok(body any) func() (int, any) { return func() (int, any) { return http.StatusOK, body } }

func TestWorkspaceView(t *testing.T) {
	listing := contract.WorkspaceListing{Path: "src", Entries: []contract.WorkspaceEntry{{Name: "a.go", Kind: "file", Size: 3, ModTime: start}}}
	text := contract.WorkspaceFile{Path: "web/page.html", Size: 31, ModTime: start, Content: "<script>alert(1)</script>hello\n"}
	binary := contract.WorkspaceFile{Path: "b.bin", Size: 3, ModTime: start, Binary: true, Data: []byte{0, 1, 2}}
	odd := contract.WorkspaceFile{Path: `dir/"quoted"; ü.txt`, Size: 2, ModTime: start, Content: "x\n"}
	diff := contract.WorkspaceDiff{Path: "a.go", Context: 3, Hunks: []contract.DiffHunk{{OldStart: 1, OldLines: 1, NewStart: 1, NewLines: 1,
		Lines: []contract.DiffLine{{Kind: "removed", OldLine: 1, Text: "a"}, {Kind: "added", NewLine: 1, Text: "b"}}}}}
	output := contract.ToolOutput{Name: "toolu_1.txt", Size: 4, ModTime: start, Content: "out\n"}
	vw := &viewWorker{answers: map[string]func() (int, any){
		"/v1/sessions/c1/workspace/list?path=src":                 ok(listing),
		"/v1/sessions/c1/workspace/list?path=.":                   ok(contract.WorkspaceListing{Path: ".", Entries: []contract.WorkspaceEntry{}}),
		"/v1/sessions/c1/workspace/file?path=web/page.html":       ok(text),
		"/v1/sessions/c1/workspace/file?path=b.bin":               ok(binary),
		`/v1/sessions/c1/workspace/file?path=dir/"quoted"; ü.txt`: ok(odd),
		"/v1/sessions/c1/workspace/diff?path=a.go":                ok(diff),
		"/v1/sessions/c1/tool-output?name=toolu_1.txt":            ok(output),
		"/v1/sessions/c1/workspace/file?path=to-secret": func() (int, any) {
			return http.StatusForbidden, contract.ErrorBody{Code: contract.CodeOutsideWorkspace, Message: `"to-secret" leads outside the conversation's workspace`}
		},
		"/v1/sessions/c1/workspace/file?path=big": func() (int, any) {
			return http.StatusRequestEntityTooLarge, contract.ErrorBody{Code: contract.CodeFileTooLarge, Message: `"big" is 2000000 bytes`}
		},
	}}
	h := newHarness(t, harnessOptions{worker: fakeOptions{command: vw.command}})
	h.insertConversation("c1", user, env)

	getJSON := func(path string, v any) {
		t.Helper()
		resp, body := h.do(http.MethodGet, path, "", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET %s: %d %s %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		decodeJSON(t, body, v)
	}
	var l contract.WorkspaceListing
	getJSON("/api/conversations/c1/workspace/list?path=src%2F", &l)
	if d := cmp.Diff(listing, l); d != "" {
		t.Errorf("listing (-want +got):\n%s", d)
	}
	getJSON("/api/conversations/c1/workspace/list", &l)
	var f contract.WorkspaceFile
	getJSON("/api/conversations/c1/workspace/file?path=web/page.html", &f)
	if d := cmp.Diff(text, f); d != "" {
		t.Errorf("file (-want +got):\n%s", d)
	}
	var dd contract.WorkspaceDiff
	getJSON("/api/conversations/c1/workspace/diff?path=a.go", &dd)
	if d := cmp.Diff(diff, dd); d != "" {
		t.Errorf("diff (-want +got):\n%s", d)
	}
	var o contract.ToolOutput
	getJSON("/api/conversations/c1/tool-output?name=toolu_1.txt", &o)
	if d := cmp.Diff(output, o); d != "" {
		t.Errorf("tool output (-want +got):\n%s", d)
	}

	// Downloads: attachments, never sniffed, never a page.
	for path, want := range map[string]struct{ ctype, name, body string }{
		"/api/conversations/c1/workspace/file?path=web/page.html&download=1":                     {"text/plain; charset=utf-8", "page.html", text.Content},
		"/api/conversations/c1/workspace/file?path=b.bin&download=1":                             {"application/octet-stream", "b.bin", "\x00\x01\x02"},
		"/api/conversations/c1/workspace/file?path=" + url.QueryEscape(odd.Path) + "&download=1": {"text/plain; charset=utf-8", `"quoted"; ü.txt`, "x\n"},
		"/api/conversations/c1/tool-output?name=toolu_1.txt&download=1":                          {"text/plain; charset=utf-8", "toolu_1.txt", "out\n"},
	} {
		resp, body := h.do(http.MethodGet, path, "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
			continue
		}
		hdr := resp.Header
		if hdr.Get("Content-Type") != want.ctype || hdr.Get("X-Content-Type-Options") != "nosniff" || string(body) != want.body {
			t.Errorf("%s: %q nosniff=%q body %q", path, hdr.Get("Content-Type"), hdr.Get("X-Content-Type-Options"), body)
		}
		disp, params, err := mime.ParseMediaType(hdr.Get("Content-Disposition"))
		if err != nil || disp != "attachment" || params["filename"] != want.name {
			t.Errorf("%s: Content-Disposition %q: %v %q %v", path, hdr.Get("Content-Disposition"), disp, params, err)
		}
		if !strings.Contains(hdr.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("%s: CSP %q", path, hdr.Get("Content-Security-Policy"))
		}
	}

	// The worker's refusals reach the browser as they are.
	resp, body := h.do(http.MethodGet, "/api/conversations/c1/workspace/file?path=to-secret", "", nil)
	wantError(t, resp, body, http.StatusForbidden, contract.CodeOutsideWorkspace)
	resp, body = h.do(http.MethodGet, "/api/conversations/c1/workspace/file?path=big&download=1", "", nil)
	if msg := wantError(t, resp, body, http.StatusRequestEntityTooLarge, contract.CodeFileTooLarge); !strings.Contains(msg, "2000000") {
		t.Errorf("too large without the size: %q", msg)
	}
}

// TestWorkspaceViewBadInput is every request the control-plane refuses
// itself: none reaches the worker.
func TestWorkspaceViewBadInput(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.insertConversation("c1", user, env)
	h.insertConversation("bobs", otherUser, env)
	h.wantRefusedGETs(t, map[string]refusal{
		"/api/conversations/c1/workspace/file?path=..":                                                  badRequest,
		"/api/conversations/c1/workspace/file?path=../x":                                                badRequest,
		"/api/conversations/c1/workspace/file?path=%2e%2e%2fx":                                          badRequest,
		"/api/conversations/c1/workspace/file?path=%252e%252e%252fx&x=1":                                badRequest,
		"/api/conversations/c1/workspace/file?path=src/../../x":                                         badRequest,
		"/api/conversations/c1/workspace/file?path=/etc/passwd":                                         badRequest,
		"/api/conversations/c1/workspace/file?path=%2Fetc%2Fpasswd":                                     badRequest,
		"/api/conversations/c1/workspace/file?path=..%5Cx":                                              badRequest,
		"/api/conversations/c1/workspace/file?path=a%00b":                                               badRequest,
		"/api/conversations/c1/workspace/file?path=a%0Ab":                                               badRequest,
		"/api/conversations/c1/workspace/file?path=%ff":                                                 badRequest,
		"/api/conversations/c1/workspace/file?path=%zz":                                                 badRequest,
		"/api/conversations/c1/workspace/file?path=a&path=b":                                            badRequest,
		"/api/conversations/c1/workspace/file?path=a&download=2":                                        badRequest,
		"/api/conversations/c1/workspace/file?path=a&other=1":                                           badRequest,
		"/api/conversations/c1/workspace/file":                                                          badRequest,
		"/api/conversations/c1/workspace/file?path=.":                                                   badRequest,
		"/api/conversations/c1/workspace/diff?path=":                                                    badRequest,
		"/api/conversations/c1/workspace/list?path=a&download=1":                                        badRequest,
		"/api/conversations/c1/workspace/list?path=" + strings.Repeat("a", contract.MaxWorkspacePath+1): badRequest,
		"/api/conversations/c1/workspace/list?path=" + strings.Repeat("%41", contract.MaxViewQuery/3+1): badRequest,
		"/api/conversations/c1/tool-output?name=../x.txt":                                               badRequest,
		"/api/conversations/c1/tool-output?name=a%2Fb.txt":                                              badRequest,
		"/api/conversations/c1/tool-output?name=x":                                                      badRequest,
		"/api/conversations/c1/tool-output":                                                             badRequest,
		"/api/conversations/c1/tool-output?path=x.txt":                                                  badRequest,
		"/api/conversations/bobs/workspace/list":                                                        notFound,
		"/api/conversations/bobs/workspace/file?path=a":                                                 notFound,
		"/api/conversations/bobs/tool-output?name=a.txt":                                                notFound,
		"/api/conversations/nobody/workspace/diff?path=a":                                               notFound,
		"/api/conversations/-x/workspace/list":                                                          invalidID,
		"/api/conversations/a%2Fb/workspace/list":                                                       invalidID,
	})
	for _, p := range []string{"/api/conversations/c1/workspace/file?path=a", "/api/conversations/c1/tool-output?name=a.txt"} {
		resp, body := h.do(http.MethodPost, p, "{}", nil)
		wantError(t, resp, body, http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed)
	}
	h.wantNoWorkerRequests(t, "")

	// A worker that cannot be reached.
	h.setWorkerURL(closedURL(t))
	resp, body := h.do(http.MethodGet, "/api/conversations/c1/workspace/list", "", nil)
	wantError(t, resp, body, http.StatusBadGateway, contract.CodeUnavailable)
}
