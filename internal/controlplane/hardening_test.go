package controlplane_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/slowbody"
)

// TestStrictJSONOnEveryEndpoint sends each JSON endpoint of the
// control-plane a body with a key twice and one with a key in another
// case, each of which encoding/json alone would take (the last one,
// ignoring case): every one is a 400 naming the key, and nothing is done.
func TestStrictJSONOnEveryEndpoint(t *testing.T) {
	h := demoHarness(t)
	identity := h.addIdentity(env, nil)
	issue := h.fileIssue(issueRequest("demo/k", "demo"))
	ts := start.Format(time.RFC3339Nano)
	browser := func(path string) func(body string) (*http.Response, []byte) {
		return func(body string) (*http.Response, []byte) { return h.do(http.MethodPost, path, body, nil) }
	}
	worker := func(path string) func(body string) (*http.Response, []byte) {
		return func(body string) (*http.Response, []byte) {
			return h.workerCall(h.reportSigner(env), http.MethodPost, path, []byte(body))
		}
	}
	endpoints := map[string]struct {
		send       func(body string) (*http.Response, []byte)
		dup, case_ string
		key, want  string // the key as sent in dup and in case_, and as it is spelt
	}{
		"create conversation": {send: browser("/api/conversations"),
			dup: `{"id":"a","id":"b"}`, case_: `{"ID":"b"}`, key: "id"},
		"send message": {send: browser("/api/conversations/demo/messages"),
			dup: `{"text":"hi","text":"bye"}`, case_: `{"Text":"hi"}`, key: "text"},
		"mint": {send: func(body string) (*http.Response, []byte) {
			return h.do(http.MethodPost, controlplane.MintPath, body, http.Header{"Authorization": {"Bearer " + identity}})
		}, dup: `{"conversation_id":"demo","conversation_id":"other"}`, case_: `{"Conversation_ID":"demo"}`, key: "conversation_id"},
		"reports": {send: worker(contract.ReportsPath),
			dup:   `{"reports":[{"idempotency_key":"k1","kind":"activity","conversation_id":"demo","time":"` + ts + `","activity":"a","activity":"b"}]}`,
			case_: `{"reports":[{"idempotency_key":"k1","Kind":"activity","conversation_id":"demo","time":"` + ts + `","activity":"a"}]}`,
			key:   "activity", want: "kind"},
		"file issue": {send: worker(contract.IssuesPath),
			dup:   `{"idempotency_key":"demo/k2","conversation_id":"demo","title":"a","title":"b","body":"b","severity":"low"}`,
			case_: `{"idempotency_key":"demo/k2","conversation_id":"demo","TITLE":"a","body":"b","severity":"low"}`,
			key:   "title"},
		"comment": {send: worker(strings.Replace(contract.IssueCommentsPath, "{id}", issue.ID, 1)),
			dup:   `{"idempotency_key":"c1","conversation_id":"demo","body":"x","status":"closed","status":"open"}`,
			case_: `{"idempotency_key":"c1","conversation_id":"demo","Body":"x"}`,
			key:   "status", want: "body"},
	}
	for name, ep := range endpoints {
		t.Run(name, func(t *testing.T) {
			want := ep.want
			if want == "" {
				want = ep.key
			}
			resp, body := ep.send(ep.dup)
			msg := wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
			if !strings.Contains(msg, fmt.Sprintf("the key %q twice", ep.key)) {
				t.Errorf("duplicate: message %q does not name the key %q", msg, ep.key)
			}
			resp, body = ep.send(ep.case_)
			msg = wantError(t, resp, body, http.StatusBadRequest, contract.CodeBadRequest)
			if !strings.Contains(msg, fmt.Sprintf("where %q is meant", want)) {
				t.Errorf("case: message %q does not name the key %q", msg, want)
			}
		})
	}
	h.wantNoWorkerRequests(t, "refused bodies")
	if cs, err := h.store.ListConversations(t.Context(), user); err != nil || len(cs) != 1 {
		t.Errorf("conversations = %v, %v; want only demo", cs, err)
	}
	if rs := h.storedReports("demo"); len(rs) != 0 {
		t.Errorf("stored reports %v, want none", rs)
	}
	if is, err := h.store.ListIssues(t.Context(), "demo", "", 0); err != nil || len(is) != 1 || len(is[0].Comments) != 0 {
		t.Errorf("issues = %+v, %v; want the one filed, without comments", is, err)
	}
}

// TestConversationTitleIsOneLine: a title with a NUL, an escape sequence,
// a line break or an invisible override is refused, naming the field; a
// title of other letters is kept, trimmed.
func TestConversationTitleIsOneLine(t *testing.T) {
	for name, title := range map[string]string{
		"NUL":                    "a\x00b",
		"ESC":                    "\x1b[2J\x1b[31mpwned",
		"CR LF":                  "one\r\ntwo",
		"right-to-left override": "report\u202etxt.exe",
		"line separator":         "one\u2028two",
		"zero-width space":       "ad\u200bmin",
		"blank":                  "  ",
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			resp, body := h.do(http.MethodPost, "/api/conversations", string(mustJSON(t, map[string]string{"id": "demo", "title": title})), nil)
			wantFieldError(t, resp, body, "title")
			if cs, err := h.store.ListConversations(t.Context(), user); err != nil || len(cs) != 0 {
				t.Errorf("stored %v, %v; want nothing", cs, err)
			}
		})
	}
	h := newHarness(t, harnessOptions{})
	resp, body := h.do(http.MethodPost, "/api/conversations", string(mustJSON(t, map[string]string{"id": "demo", "title": " Überprüfung 🚀 "})), nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if c, err := h.store.GetConversation(t.Context(), "demo"); err != nil || c.Title != "Überprüfung 🚀" {
		t.Errorf("stored title %q, %v; want it trimmed", c.Title, err)
	}
}

// TestIssueTitleAndLabelsAreOneLine: what a worker files is held to the
// same rule: bidirectional overrides, line separators and zero-width
// characters are refused in titles and labels.
func TestIssueTitleAndLabelsAreOneLine(t *testing.T) {
	tests := map[string]struct {
		mut   func(*contract.CreateIssueRequest)
		field string
	}{
		"title with an override":         {func(r *contract.CreateIssueRequest) { r.Title = "Fix \u202eexe.txt" }, "title"},
		"title with an isolate":          {func(r *contract.CreateIssueRequest) { r.Title = "a\u2066b" }, "title"},
		"title with a line separator":    {func(r *contract.CreateIssueRequest) { r.Title = "one\u2028two" }, "title"},
		"title with a zero-width space":  {func(r *contract.CreateIssueRequest) { r.Title = "Fl\u200baky" }, "title"},
		"title with a BOM":               {func(r *contract.CreateIssueRequest) { r.Title = "\ufeffFlaky" }, "title"},
		"title with ESC":                 {func(r *contract.CreateIssueRequest) { r.Title = "\x1b]0;owned\x07" }, "title"},
		"label with an override":         {func(r *contract.CreateIssueRequest) { r.Labels = []string{"ci", "a\u202eb"} }, "labels[1]"},
		"label with a zero-width joiner": {func(r *contract.CreateIssueRequest) { r.Labels = []string{"c\u200di"} }, "labels[0]"},
		"key with NUL":                   {func(r *contract.CreateIssueRequest) { r.IdempotencyKey = "demo/\x00" }, "idempotency_key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := demoHarness(t)
			req := issueRequest("demo/k", "demo")
			tc.mut(&req)
			resp, data := h.workerCall(h.reportSigner(env), http.MethodPost, contract.IssuesPath, mustJSON(t, req))
			wantFieldError(t, resp, data, tc.field)
			if is, err := h.store.ListIssues(t.Context(), "demo", "", 0); err != nil || len(is) != 0 {
				t.Errorf("stored %v, %v; want nothing", is, err)
			}
		})
	}
}

// TestReportTimesAndCounts: a report dated 9999-12-31, or with a negative
// token count or duration, refuses its batch with a 400 naming the report
// and the field; nothing of the batch is stored.
func TestReportTimesAndCounts(t *testing.T) {
	tests := map[string]struct {
		mut   func(*contract.Report)
		field string
	}{
		"9999-12-31":              {func(r *contract.Report) { r.Time = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC) }, "reports[1].time"},
		"an hour ahead":           {func(r *contract.Report) { r.Time = start.Add(time.Hour) }, "reports[1].time"},
		"year 1":                  {func(r *contract.Report) { r.Time = time.Time{}.Add(time.Hour) }, "reports[1].time"},
		"no time":                 {func(r *contract.Report) { r.Time = time.Time{} }, "reports[1].time"},
		"negative input tokens":   {func(r *contract.Report) { r.Usage.InputTokens = -1_000_000 }, "reports[1].usage.input_tokens"},
		"negative output tokens":  {func(r *contract.Report) { r.Usage.OutputTokens = -1 }, "reports[1].usage.output_tokens"},
		"absurd cache reads":      {func(r *contract.Report) { r.Usage.CacheReadInputTokens = 1 << 62 }, "reports[1].usage.cache_read_input_tokens"},
		"model with NUL":          {func(r *contract.Report) { r.Usage.Model = "m\x00" }, "reports[1].usage.model"},
		"unknown kind":            {func(r *contract.Report) { r.Kind = "spend" }, "reports[1].kind"},
		"key with a control char": {func(r *contract.Report) { r.IdempotencyKey = "demo/\x1b" }, "reports[1].idempotency_key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := demoHarness(t)
			bad := usageReport("demo/usage-2", "demo")
			tc.mut(&bad)
			body := batch(t, usageReport("demo/usage-1", "demo"), bad)
			resp, data := h.send(h.reportRequest(h.reportSigner(env), body), body)
			wantFieldError(t, resp, data, tc.field)
			if rs := h.storedReports("demo"); len(rs) != 0 {
				t.Errorf("stored %v, want nothing", rs)
			}
		})
	}
	t.Run("negative tool duration", func(t *testing.T) {
		h := demoHarness(t)
		body := batch(t, contract.Report{IdempotencyKey: "demo/tool-1", Kind: contract.ReportToolUse, ConversationID: "demo", Time: start,
			Tool: &contract.ToolReport{ID: "toolu_1", Name: "Bash", DurationMS: -4}})
		resp, data := h.send(h.reportRequest(h.reportSigner(env), body), body)
		wantFieldError(t, resp, data, "reports[0].tool.duration_ms")
	})
	t.Run("a day old and a few minutes ahead are taken", func(t *testing.T) {
		h := demoHarness(t)
		old, ahead := usageReport("demo/usage-1", "demo"), usageReport("demo/usage-2", "demo")
		old.Time, ahead.Time = start.Add(-24*time.Hour), start.Add(contract.MaxFutureSkew)
		body := batch(t, old, ahead)
		if resp, data := h.send(h.reportRequest(h.reportSigner(env), body), body); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, data)
		}
	})
}

// TestUnauthenticatedEndpointsRefuseRebinding: a control-plane with a local
// user (talkide dev) trusts loopback, so /metrics and /healthz, which need
// no credential, answer only requests addressed to a loopback host: a page
// that rebinds evil.example to 127.0.0.1 cannot read them. A shared
// control-plane (no local user) is scraped by its service's name and
// answers any host.
func TestUnauthenticatedEndpointsRefuseRebinding(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("talkide_up 1\n")) })
	get := func(h *harness, path, host string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		return h.send(req, nil)
	}
	local := newHarness(t, harnessOptions{metrics: metrics})
	shared := newHarness(t, harnessOptions{metrics: metrics, noLocalUser: true})
	for _, path := range []string{"/metrics", "/healthz"} {
		for _, host := range []string{"evil.example", "evil.example:7878", "10.0.0.1", "127.0.0.1.evil.example", "localhost.evil.example:80"} {
			resp, body := get(local, path, host)
			if msg := wantError(t, resp, body, http.StatusForbidden, contract.CodeForbidden); !strings.Contains(msg, "loopback") {
				t.Errorf("%s with Host %s: message %q", path, host, msg)
			}
			if strings.Contains(string(body), "talkide_up") || strings.Contains(string(body), `"ok"`) {
				t.Errorf("%s with Host %s revealed its body: %s", path, host, body)
			}
		}
		for _, host := range []string{"127.0.0.1:7878", "localhost:7878", "[::1]:7878", "127.0.0.2"} {
			if resp, body := get(local, path, host); resp.StatusCode != http.StatusOK {
				t.Errorf("%s with Host %s: status %d: %s", path, host, resp.StatusCode, body)
			}
		}
		if resp, body := get(shared, path, "controlplane.talkide.svc:7878"); resp.StatusCode != http.StatusOK {
			t.Errorf("shared control-plane %s by its service name: status %d: %s", path, resp.StatusCode, body)
		}
	}
}

// TestNonCanonicalPathsAreNotRedirected: net/http.ServeMux answers a path
// with "..", "." or "//" with a 307 to its cleaned form, which may lie
// outside the prefix the client addressed (and a client that follows it
// sends its body, and its credentials, there). The control-plane answers
// 400 in its own shape instead, and leaves a path under the gateway's
// prefix (as sent or once cleaned) to the gateway, which answers in
// Anthropic's; a prefix without its slash is not redirected either.
func TestNonCanonicalPathsAreNotRedirected(t *testing.T) {
	gatewaySaw := make(chan string, 16)
	gw := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gatewaySaw <- r.URL.EscapedPath()
		w.WriteHeader(http.StatusTeapot)
	})
	h := newHarness(t, harnessOptions{gateway: gw})
	h.insertConversation("demo", user, env)
	h.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	tests := map[string]struct {
		method, path string
		gateway      bool // the gateway must get it as sent
		status       int  // else the control-plane's answer
	}{
		"browser path into the gateway": {method: "POST", path: "/api/conversations/../internal/gateway/anthropic/v1/messages", gateway: true},
		"gateway path out of it":        {method: "POST", path: contract.GatewayPrefix + "/../../../../api/conversations", gateway: true},
		"gateway path, double slash":    {method: "POST", path: contract.GatewayPrefix + "//v1/messages", gateway: true},
		"leading double slash, gateway": {method: "POST", path: "/" + contract.GatewayPrefix + "/v1/messages", gateway: true},
		"gateway prefix alone":          {method: "POST", path: contract.GatewayPrefix, gateway: true},
		"browser path into admin":       {method: "GET", path: "/api/conversations/demo/../../admin/limits", status: 400},
		"dot segment":                   {method: "GET", path: "/api/conversations/./demo", status: 400},
		"trailing dot dot":              {method: "GET", path: "/api/conversations/demo/..", status: 400},
		"double slash":                  {method: "GET", path: "//api/conversations", status: 400},
		"empty segment":                 {method: "POST", path: "/api/conversations//messages", status: 400},
		"reports path, dot dot":         {method: "POST", path: contract.ReportsPath + "/../reports", status: 400},
		"metrics, dot":                  {method: "GET", path: "/./metrics", status: 400},
		"admin prefix alone":            {method: "GET", path: "/api/admin", status: 503},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, body := h.do(tc.method, tc.path, `{}`, nil)
			if resp.StatusCode >= 300 && resp.StatusCode < 400 {
				t.Fatalf("status %d, Location %q: a redirect", resp.StatusCode, resp.Header.Get("Location"))
			}
			if tc.gateway {
				if resp.StatusCode != http.StatusTeapot {
					t.Fatalf("status %d, want the gateway's: %s", resp.StatusCode, body)
				}
				if got := <-gatewaySaw; got != tc.path {
					t.Errorf("the gateway got %q, want %q", got, tc.path)
				}
				return
			}
			code := contract.CodeBadRequest
			if tc.status == 503 {
				code = contract.CodeUnavailable
			}
			msg := wantError(t, resp, body, tc.status, code)
			if tc.status == 400 && !strings.Contains(msg, "not canonical") {
				t.Errorf("message %q", msg)
			}
		})
	}
	h.wantNoWorkerRequests(t, "")
}

// TestSlowBodiesAreCut: a client that trickles a body one byte at a time
// (it would take 10 s) is answered and disconnected soon after the body
// deadline (Options.BodyTimeout, 300 ms here), whether the endpoint reads
// the body or refuses the request before it does.
func TestSlowBodiesAreCut(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		bytes   = 100
		every   = 100 * time.Millisecond
		within  = 3 * time.Second
	)
	h := newHarness(t, harnessOptions{bodyTimeout: timeout})
	addr := strings.TrimPrefix(h.url, "http://")
	for path, want := range map[string]int{
		"/api/conversations":                    http.StatusBadRequest,         // read by the browser API
		contract.ReportsPath:                    http.StatusBadRequest,         // read before its signature is checked
		controlplane.MintPath:                   http.StatusBadRequest,         // read before its credential is checked
		contract.GatewayPrefix + "/v1/messages": http.StatusServiceUnavailable, // refused unread
		"/api/conversations/demo/interrupt":     http.StatusNotFound,           // refused unread
		"/nope":                                 http.StatusNotFound,           // refused unread
	} {
		t.Run(path, func(t *testing.T) {
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, bytes)
			resp, _ := slowbody.Send(t, addr, head, 'x', bytes, every, timeout+within)
			if resp.StatusCode != want {
				t.Errorf("status %d, want %d", resp.StatusCode, want)
			}
		})
	}
}

// TestStrictJSONOperatorAPI: the operator API's bodies are held to the
// same decoder: a key twice or in another case is a 400 naming it, and no
// limit is set.
func TestStrictJSONOperatorAPI(t *testing.T) {
	h := newAdminHarness(t, openSQLite(t), nil)
	for body, want := range map[string]string{
		`{"max_usd":"5","max_usd":"500"}`: `the key "max_usd" twice`,
		`{"MAX_USD":"500"}`:               `the key "MAX_USD" where "max_usd" is meant`,
		`{"max_usd":"5","Hard":true}`:     `the key "Hard" where "hard" is meant`,
	} {
		resp, b := h.do("PUT", "/api/admin/users/alice/limits/daily", body, "")
		if msg := wantError(t, resp, b, http.StatusBadRequest, contract.CodeBadRequest); !strings.Contains(msg, want) {
			t.Errorf("%s: message %q does not say %q", body, msg, want)
		}
	}
	var got struct {
		Limits []json.RawMessage `json:"limits"`
	}
	h.ok("GET", "/api/admin/users/alice/limits", "", http.StatusOK, &got)
	if len(got.Limits) != 0 {
		t.Errorf("limits set by refused bodies: %s", got.Limits)
	}
}
