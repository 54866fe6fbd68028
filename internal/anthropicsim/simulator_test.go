package anthropicsim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/roundtrip"
)

const testKey = "sk-sim-test-key-0123456789"

// newServer starts a simulator behind a loopback httptest server.
func newServer(t *testing.T, opts *Options) (*Simulator, *httptest.Server) {
	t.Helper()
	sim := New(testKey, opts)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, srv
}

// do sends a request with the test key unless hdr overrides headers, and
// returns the response with its body read.
func do(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", testKey)
	req.Header.Set("content-type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return roundtrip.With(t, http.DefaultClient, req)
}

func post(t *testing.T, srv *httptest.Server, body string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodPost, srv.URL+"/v1/messages", body, nil)
}

// testMessage is the non-streaming response, decoded strictly.
type testMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []testBlock    `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        map[string]int `json:"usage"`
}

type testBlock struct {
	Type  string          `json:"type"`
	Text  string          `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

func decodeStrict(t *testing.T, b []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

// getMessage posts body and decodes the 200 Message.
func getMessage(t *testing.T, srv *httptest.Server, body string) testMessage {
	t.Helper()
	resp, b := post(t, srv, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, body %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var m testMessage
	decodeStrict(t, b, &m)
	return m
}

// userBody is a request with one user message of text and the given tools.
func userBody(text string, tools ...string) string {
	req := map[string]any{
		"model":      "claude-sim",
		"max_tokens": 1024,
		"messages":   []any{map[string]any{"role": "user", "content": text}},
	}
	if len(tools) > 0 {
		var ts []any
		for _, name := range tools {
			ts = append(ts, map[string]any{"name": name, "description": "d", "input_schema": map[string]any{"type": "object"}})
		}
		req["tools"] = ts
	}
	b, _ := json.Marshal(req)
	return string(b)
}

func wantErrorBody(t *testing.T, b []byte, wantType string) string {
	t.Helper()
	var e errorBody
	decodeStrict(t, b, &e)
	if e.Type != "error" || e.Error.Type != wantType || e.Error.Message == "" {
		t.Errorf("error body %s, want type %q", b, wantType)
	}
	return e.Error.Message
}

func TestNewPanicsOnEmptyKey(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(\"\") did not panic")
		}
	}()
	New("", nil)
}

func TestAuth(t *testing.T) {
	_, srv := newServer(t, nil)
	tests := map[string]struct {
		hdr  map[string]string
		want int
	}{
		"x-api-key":          {nil, 200},
		"missing":            {map[string]string{"x-api-key": ""}, 401},
		"wrong key":          {map[string]string{"x-api-key": "sk-wrong"}, 401},
		"prefix of key":      {map[string]string{"x-api-key": testKey[:5]}, 401},
		"bearer":             {map[string]string{"x-api-key": "", "Authorization": "Bearer " + testKey}, 200},
		"bearer wrong":       {map[string]string{"x-api-key": "", "Authorization": "Bearer sk-wrong"}, 401},
		"basic scheme":       {map[string]string{"x-api-key": "", "Authorization": "Basic " + testKey}, 401},
		"wrong x, no bearer": {map[string]string{"x-api-key": testKey + "x"}, 401},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			resp, b := do(t, http.MethodPost, srv.URL+"/v1/messages", userBody("hi"), tt.hdr)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, b)
			}
			if resp.Header.Get("request-id") == "" {
				t.Error("no request-id header")
			}
			if bytes.Contains(b, []byte(testKey[:8])) {
				t.Errorf("response echoes the key: %s", b)
			}
			if tt.want == 401 {
				want := `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`
				if got := string(bytes.TrimSpace(b)); got != want {
					t.Errorf("body %s, want %s", got, want)
				}
			}
		})
	}
}

func TestRouting(t *testing.T) {
	_, srv := newServer(t, nil)
	tests := map[string]struct {
		method, path string
		want         int
		wantType     string
	}{
		"messages":             {"POST", "/v1/messages", 200, ""},
		"query ignored":        {"POST", "/v1/messages?beta=true", 200, ""},
		"count_tokens":         {"POST", "/v1/messages/count_tokens?beta=true", 200, ""},
		"unknown path":         {"POST", "/v1/complete", 404, "not_found_error"},
		"trailing slash":       {"POST", "/v1/messages/", 404, "not_found_error"},
		"prefixed path":        {"POST", "/api/v1/messages", 404, "not_found_error"},
		"root":                 {"GET", "/", 404, "not_found_error"},
		"GET messages":         {"GET", "/v1/messages", 405, "invalid_request_error"},
		"PUT count_tokens":     {"PUT", "/v1/messages/count_tokens", 405, "invalid_request_error"},
		"unknown path no auth": {"POST", "/nope", 404, "not_found_error"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			resp, b := do(t, tt.method, srv.URL+tt.path, userBody("hi"), nil)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, b)
			}
			if resp.Header.Get("request-id") == "" {
				t.Error("no request-id header")
			}
			if tt.wantType != "" {
				wantErrorBody(t, b, tt.wantType)
			}
			if tt.want == 405 && resp.Header.Get("Allow") != "POST" {
				t.Errorf("Allow = %q", resp.Header.Get("Allow"))
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	_, srv := newServer(t, nil)
	tests := map[string]struct {
		body    string
		wantMsg string
	}{
		"malformed JSON":        {`{"model":`, "invalid JSON"},
		"not an object":         {`[1,2]`, "request body: must be an object, got array"},
		"trailing garbage":      {`{"model":"m"} x`, "invalid JSON"},
		"missing model":         {`{"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "model: field required"},
		"empty model":           {`{"model":"","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "model: field required"},
		"model not a string":    {`{"model":7,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "model: must be a string, got number"},
		"missing messages":      {`{"model":"m","max_tokens":10}`, "messages: at least one"},
		"empty messages":        {`{"model":"m","max_tokens":10,"messages":[]}`, "messages: at least one"},
		"missing max_tokens":    {`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "max_tokens: field required"},
		"zero max_tokens":       {`{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens: must be at least 1"},
		"negative max_tokens":   {`{"model":"m","max_tokens":-5,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens: must be at least 1"},
		"fractional max_tokens": {`{"model":"m","max_tokens":1.5,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens: must be an integer"},
		"stream not bool":       {`{"model":"m","max_tokens":9,"stream":"yes","messages":[{"role":"user","content":"hi"}]}`, "stream: must be a boolean, got string"},
		"message not an object": {`{"model":"m","max_tokens":9,"messages":["hi"]}`, "messages"},
		"bad role":              {`{"model":"m","max_tokens":9,"messages":[{"role":"robot","content":"hi"}]}`, "messages.0.role"},
		"missing content":       {`{"model":"m","max_tokens":9,"messages":[{"role":"user"}]}`, "messages.0.content: field required"},
		"numeric content":       {`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":5}]}`, "messages.0.content: must be a string or an array"},
		"block without type":    {`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages.0.content.0.type"},
		"text block no text":    {`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages.0.content.0.text"},
		"tool_result no id":     {`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, "tool_use_id"},
		"tool_result bad":       {`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":3}]}]}`, "messages.0.content.0.content"},
		"system wrong type":     {`{"model":"m","max_tokens":9,"system":5,"messages":[{"role":"user","content":"hi"}]}`, "system"},
		"tools not array":       {`{"model":"m","max_tokens":9,"tools":{},"messages":[{"role":"user","content":"hi"}]}`, "tools"},
		"tool without name":     {`{"model":"m","max_tokens":9,"tools":[{"input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}`, "tools.0.name"},
		"image without source":  {`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"image"}]}]}`, "messages.0.content.0.source: field required"},
		"image by url":          {`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"http://x"}}]}]}`, "source.type"},
		"image of a bad type":   {`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"AAAA"}}]}]}`, "source.media_type"},
		"image not base64":      {`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"*!"}}]}]}`, "source.data"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			resp, b := post(t, srv, tt.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, b)
			}
			if resp.Header.Get("request-id") == "" {
				t.Error("no request-id header")
			}
			if msg := wantErrorBody(t, b, "invalid_request_error"); !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", msg, tt.wantMsg)
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	_, srv := newServer(t, nil)
	big := `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"` + strings.Repeat("a", maxBodyBytes) + `"}]}`
	tests := map[string]io.Reader{
		"with Content-Length":    strings.NewReader(big),
		"chunked (no length)":    io.MultiReader(strings.NewReader(big)),
		"exactly one over limit": io.MultiReader(strings.NewReader(strings.Repeat(" ", maxBodyBytes+1))),
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", body)
			req.Header.Set("x-api-key", testKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413: %.200s", resp.StatusCode, b)
			}
			wantErrorBody(t, b, "request_too_large")
		})
	}
}

func TestEcho(t *testing.T) {
	_, srv := newServer(t, nil)
	body := `{"model":"claude-sim","max_tokens":1000,"system":[{"type":"text","text":"be brief"}],"messages":[
		{"role":"system","content":"claude code sometimes sends these"},
		{"role":"user","content":"first"},
		{"role":"assistant","content":[{"type":"text","text":"ok"}]},
		{"role":"user","content":[{"type":"text","text":"second <b>&"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},{"type":"text","text":"part two"}]},
		{"role":"system","content":"trailing system entry is not a user message"}
	]}`
	m := getMessage(t, srv, body)
	const text = "[simulator] saw 1 image (image/png, 3 bytes)\n[simulator] messages=5 you said: second <b>&\npart two"
	want := testMessage{
		ID: m.ID, Type: "message", Role: "assistant", Model: "claude-sim",
		Content:    []testBlock{{Type: "text", Text: text}},
		StopReason: ptr("end_turn"),
		Usage: map[string]int{
			"input_tokens":                (len(body) + 3) / 4,
			"output_tokens":               (len(text) + 3) / 4,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		},
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(m.ID, "msg_sim_") {
		t.Errorf("id %q", m.ID)
	}
}

func ptr[T any](v T) *T { return &v }

func TestToolDirectives(t *testing.T) {
	_, srv := newServer(t, nil)
	tests := map[string]struct {
		text      string
		tools     []string
		want      []testBlock // ids are checked apart
		wantStop  string
		wantNoIDs bool
	}{
		"one call, nested JSON with ] and braces": {
			text:  `[[tool:get_weather {"city": "Paris ]] [x]", "opts": {"units": ["c", {"deep": "}"}]}} ]]`,
			tools: []string{"get_weather"},
			want: []testBlock{{Type: "tool_use", Name: "get_weather",
				Input: json.RawMessage(`{"city":"Paris ]] [x]","opts":{"units":["c",{"deep":"}"}]}}`)}},
			wantStop: "tool_use",
		},
		"lead text and two calls in order": {
			text:  "please look:\n[[tool:Read {\"path\":\"a.go\"}]] then [[tool:Bash {\"command\":\"ls\"}]]",
			tools: []string{"Bash", "Read"},
			want: []testBlock{
				{Type: "text", Text: "[simulator] please look:"},
				{Type: "tool_use", Name: "Read", Input: json.RawMessage(`{"path":"a.go"}`)},
				{Type: "tool_use", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)},
			},
			wantStop: "tool_use",
		},
		"input omitted": {
			text:     "[[tool:list_files]]",
			tools:    []string{"list_files"},
			want:     []testBlock{{Type: "tool_use", Name: "list_files", Input: json.RawMessage(`{}`)}},
			wantStop: "tool_use",
		},
		"sleep directive is not lead text": {
			text:     "[[sleep:0]]  [[tool:t {}]]",
			tools:    []string{"t"},
			want:     []testBlock{{Type: "tool_use", Name: "t", Input: json.RawMessage(`{}`)}},
			wantStop: "tool_use",
		},
		"tool not offered": {
			text:      `[[tool:rm_rf {"path":"/"}]]`,
			tools:     []string{"Read", "Bash"},
			want:      []testBlock{{Type: "text", Text: "[simulator] cannot call tool rm_rf: not offered in this request's tools (offered: Read, Bash)"}},
			wantStop:  "end_turn",
			wantNoIDs: true,
		},
		"no tools at all": {
			text:      `[[tool:Read {}]]`,
			want:      []testBlock{{Type: "text", Text: "[simulator] cannot call tool Read: not offered in this request's tools (offered: none)"}},
			wantStop:  "end_turn",
			wantNoIDs: true,
		},
		"one of two not offered": {
			text:      `[[tool:Read {}]] [[tool:Write {}]]`,
			tools:     []string{"Read"},
			want:      []testBlock{{Type: "text", Text: "[simulator] cannot call tool Write: not offered in this request's tools (offered: Read)"}},
			wantStop:  "end_turn",
			wantNoIDs: true,
		},
		"malformed JSON": {
			text:      `[[tool:Read {"path": }]]`,
			tools:     []string{"Read"},
			wantStop:  "end_turn",
			wantNoIDs: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			m := getMessage(t, srv, userBody(tt.text, tt.tools...))
			if *m.StopReason != tt.wantStop {
				t.Errorf("stop_reason %q, want %q", *m.StopReason, tt.wantStop)
			}
			ids := map[string]bool{}
			for i := range m.Content {
				if m.Content[i].Type == "tool_use" {
					if !strings.HasPrefix(m.Content[i].ID, "toolu_sim_") || ids[m.Content[i].ID] {
						t.Errorf("bad or repeated tool_use id %q", m.Content[i].ID)
					}
					ids[m.Content[i].ID] = true
					m.Content[i].ID = ""
				}
			}
			if tt.want == nil { // malformed: only the explanation is checked
				if len(m.Content) != 1 || !strings.HasPrefix(m.Content[0].Text, "[simulator] malformed directive") {
					t.Errorf("content %+v", m.Content)
				}
				return
			}
			if diff := cmp.Diff(tt.want, m.Content); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToolUseIDsDeterministicAndDistinctPerTurn(t *testing.T) {
	_, srv := newServer(t, nil)
	body := userBody(`[[tool:t {"a":1}]]`, "t")
	a, b := getMessage(t, srv, body), getMessage(t, srv, body)
	if a.Content[0].ID != b.Content[0].ID {
		t.Errorf("same request, ids %q and %q", a.Content[0].ID, b.Content[0].ID)
	}
	later := `{"model":"m","max_tokens":100,"tools":[{"name":"t","input_schema":{}}],"messages":[
		{"role":"user","content":"[[tool:t {\"a\":1}]]"},
		{"role":"assistant","content":[{"type":"tool_use","id":"` + a.Content[0].ID + `","name":"t","input":{"a":1}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + a.Content[0].ID + `","content":"1"},{"type":"text","text":"[[tool:t {\"a\":1}]]"}]}]}`
	c := getMessage(t, srv, later)
	if c.Content[0].Type != "tool_use" || c.Content[0].ID == a.Content[0].ID {
		t.Errorf("later turn reuses id %q: %+v", a.Content[0].ID, c.Content)
	}
}

func TestToolResults(t *testing.T) {
	_, srv := newServer(t, nil)
	long := strings.Repeat("é", 150) + strings.Repeat("z", 100) // 250 characters, 400 bytes
	body := map[string]any{
		"model": "m", "max_tokens": 4096,
		"messages": []any{
			map[string]any{"role": "user", "content": "go"},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "tool_use", "id": "toolu_1", "name": "a", "input": map[string]any{}},
				map[string]any{"type": "tool_use", "id": "toolu_2", "name": "b", "input": map[string]any{}},
				map[string]any{"type": "tool_use", "id": "toolu_3", "name": "c", "input": map[string]any{}},
			}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "short result"},
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": []any{
					map[string]any{"type": "text", "text": "exit 1"},
					map[string]any{"type": "image", "source": map[string]any{}},
					map[string]any{"type": "text", "text": "stderr"},
				}},
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_3", "content": long},
			}},
		},
	}
	b, _ := json.Marshal(body)
	m := getMessage(t, srv, string(b))
	want := "[simulator] tool results: 1) short result\n2) (error) exit 1\nstderr\n3) " + strings.Repeat("é", 150) + strings.Repeat("z", 50) + "…"
	if len(m.Content) != 1 || m.Content[0].Text != want {
		t.Errorf("content %+v\nwant text %q", m.Content, want)
	}
	if *m.StopReason != "end_turn" {
		t.Errorf("stop_reason %q", *m.StopReason)
	}
}

func TestErrorDirective(t *testing.T) {
	_, srv := newServer(t, nil)
	tests := map[int]string{
		400: "invalid_request_error",
		401: "authentication_error",
		403: "permission_error",
		404: "not_found_error",
		413: "request_too_large",
		429: "rate_limit_error",
		500: "api_error",
		503: "api_error",
		529: "overloaded_error",
	}
	for status, wantType := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(http.StatusText(status)+map[bool]string{true: " stream"}[stream], func(t *testing.T) {
				body := userBody("please fail [[error:" + itoa(status) + "]]")
				if stream {
					body = strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
				}
				resp, b := post(t, srv, body)
				if resp.StatusCode != status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
				}
				wantErrorBody(t, b, wantType)
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				if resp.Header.Get("request-id") == "" {
					t.Error("no request-id")
				}
				wantRetry := map[bool]string{true: "1"}[status == 429]
				if got := resp.Header.Get("retry-after"); got != wantRetry {
					t.Errorf("retry-after %q, want %q", got, wantRetry)
				}
			})
		}
	}
	t.Run("429 exact shape", func(t *testing.T) {
		_, b := post(t, srv, userBody("[[error:429]]"))
		want := `{"type":"error","error":{"type":"rate_limit_error","message":"[simulator] simulated 429 rate_limit_error requested by an [[error:429]] directive"}}`
		if got := string(bytes.TrimSpace(b)); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("out of range is malformed", func(t *testing.T) {
		m := getMessage(t, srv, userBody("[[error:200]]"))
		if !strings.Contains(m.Content[0].Text, "malformed directive") {
			t.Errorf("content %+v", m.Content)
		}
	})
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestMaxTokensTruncates(t *testing.T) {
	_, srv := newServer(t, nil)
	text := strings.Repeat("word ", 40)
	tests := map[string]struct {
		maxTokens int
		wantText  string
		wantStop  string
	}{
		"fits":            {1000, "[simulator] messages=1 you said: " + text, "end_turn"},
		"cut at 40 bytes": {10, ("[simulator] messages=1 you said: " + text)[:40], "max_tokens"},
		"marker survives": {1, "[simulator] ", "max_tokens"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			body := strings.Replace(userBody(text), `"max_tokens":1024`, `"max_tokens":`+itoa(tt.maxTokens), 1)
			m := getMessage(t, srv, body)
			if m.Content[0].Text != tt.wantText || *m.StopReason != tt.wantStop {
				t.Errorf("got %q %q, want %q %q", m.Content[0].Text, *m.StopReason, tt.wantText, tt.wantStop)
			}
		})
	}
	t.Run("lead text spends the budget, tool calls dropped", func(t *testing.T) {
		body := strings.Replace(userBody(strings.Repeat("x", 100)+" [[tool:t {}]]", "t"), `"max_tokens":1024`, `"max_tokens":5`, 1)
		m := getMessage(t, srv, body)
		if len(m.Content) != 1 || m.Content[0].Text != "[simulator] "+strings.Repeat("x", 8) || *m.StopReason != "max_tokens" {
			t.Errorf("got %+v %q", m.Content, *m.StopReason)
		}
	})
}

func TestUsageAndCacheRule(t *testing.T) {
	_, srv := newServer(t, nil)
	withCache := func(system, text string) string {
		return `{"model":"m","max_tokens":100,"system":[{"type":"text","text":"` + system + `","cache_control":{"type":"ephemeral"}}],` +
			`"tools":[{"name":"Read","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"` + text + `"}]}`
	}
	prefix := int((len(`[{"name":"Read","input_schema":{"type":"object"}}]`) + len(`[{"type":"text","text":"sys A","cache_control":{"type":"ephemeral"}}]`) + 3) / 4)
	tests := []struct {
		name                 string
		body                 string
		wantCreate, wantRead int
	}{
		{"no cache_control", userBody("hello"), 0, 0},
		{"first prefix creates", withCache("sys A", "one"), prefix, 0},
		{"same prefix reads", withCache("sys A", "two, longer"), 0, prefix},
		{"other system creates", withCache("sys B", "one"), prefix, 0},
		{"cache_control text in a message is not a key", userBody(`cache_control`), 0, 0},
	}
	for _, tt := range tests { // in order: the rule depends on history
		m := getMessage(t, srv, tt.body)
		total := (len(tt.body) + 3) / 4
		u := m.Usage
		if u["cache_creation_input_tokens"] != tt.wantCreate || u["cache_read_input_tokens"] != tt.wantRead {
			t.Errorf("%s: usage %v, want creation %d read %d", tt.name, u, tt.wantCreate, tt.wantRead)
		}
		if got := u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]; got != total {
			t.Errorf("%s: input tokens add up to %d, want ceil(%d/4) = %d", tt.name, got, len(tt.body), total)
		}
		outBytes := len(m.Content[0].Text)
		if u["output_tokens"] != (outBytes+3)/4 {
			t.Errorf("%s: output_tokens %d for %d bytes", tt.name, u["output_tokens"], outBytes)
		}
	}
}

func TestCountTokens(t *testing.T) {
	_, srv := newServer(t, nil)
	body := `{"model":"m","messages":[{"role":"user","content":"[[error:500]] directives are ignored here"}]}`
	resp, b := do(t, "POST", srv.URL+"/v1/messages/count_tokens", body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var got map[string]int
	decodeStrict(t, b, &got)
	if diff := cmp.Diff(map[string]int{"input_tokens": (len(body) + 3) / 4}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	resp, b = do(t, "POST", srv.URL+"/v1/messages/count_tokens", `{"model":"m"}`, nil)
	if resp.StatusCode != 400 {
		t.Errorf("no messages: status %d: %s", resp.StatusCode, b)
	}
}

func TestRequestsRecorded(t *testing.T) {
	sim, srv := newServer(t, nil)
	bodies := []string{userBody("one"), `{"bad json`, userBody("three")}
	for _, b := range bodies {
		post(t, srv, b)
	}
	do(t, "POST", srv.URL+"/v1/messages", userBody("unauthenticated"), map[string]string{"x-api-key": "nope"})
	do(t, "POST", srv.URL+"/v1/messages/count_tokens", userBody("counted, not recorded"), nil)

	got := sim.Requests()
	var gotS []string
	for _, b := range got {
		gotS = append(gotS, string(b))
	}
	if diff := cmp.Diff(bodies, gotS); diff != "" {
		t.Fatalf("Requests (-want +got):\n%s", diff)
	}
	got[0][0] = 'X'
	if sim.Requests()[0][0] != '{' {
		t.Error("Requests does not return a copy")
	}
}

func TestLastMessages(t *testing.T) {
	sim, srv := newServer(t, nil)
	if _, _, err := sim.LastMessages(); err == nil {
		t.Error("LastMessages before any request: no error")
	}
	post(t, srv, userBody("one"))
	msgs, body, err := sim.LastMessages()
	if err != nil || len(msgs) != 1 || string(body) != userBody("one") || !strings.Contains(string(msgs[0]), `"one"`) {
		t.Errorf("LastMessages = %s, %s, %v", msgs, body, err)
	}
	post(t, srv, `{"bad json`)
	if _, body, err := sim.LastMessages(); err == nil || string(body) != `{"bad json` {
		t.Errorf("LastMessages after a request that is not JSON = %s, %v", body, err)
	}
}

func TestDeterministic(t *testing.T) {
	_, srv := newServer(t, nil)
	for _, text := range []string{"hello there", `[[tool:t {"x":[1,2]}]]`, "[[tool:nope]]"} {
		body := userBody(text, "t")
		a, b := getMessage(t, srv, body), getMessage(t, srv, body)
		if a.ID == b.ID {
			t.Errorf("message ids repeat: %q", a.ID)
		}
		a.ID, b.ID = "", ""
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("%q: replies differ (-first +second):\n%s", text, diff)
		}
	}
}

func TestLogging(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, srv := newServer(t, &Options{Logger: logger})
	post(t, srv, userBody("hi"))
	do(t, "POST", srv.URL+"/v1/messages", userBody("hi"), map[string]string{"x-api-key": testKey + "-wrong"})
	do(t, "POST", srv.URL+"/v1/messages", userBody("hi"), map[string]string{"x-api-key": "", "Authorization": "Bearer " + testKey})
	logs := buf.String()
	if !strings.Contains(logs, "NOT a model") {
		t.Errorf("no start line saying it is not a model:\n%s", logs)
	}
	if strings.Count(logs, "anthropic simulator serving") != 1 {
		t.Errorf("start line not logged exactly once:\n%s", logs)
	}
	if strings.Contains(logs, testKey[:8]) {
		t.Errorf("logs contain the key:\n%s", logs)
	}
	if !strings.Contains(logs, "status=401") || !strings.Contains(logs, "request_id=req_sim_") {
		t.Errorf("request lines missing:\n%s", logs)
	}
}

// TestImageBlocks: a message's image blocks are answered with what they
// were, and their bytes count as input tokens.
func TestImageBlocks(t *testing.T) {
	_, srv := newServer(t, nil)
	img := func(mt string, n int) string {
		return `{"type":"image","source":{"type":"base64","media_type":"` + mt + `","data":"` + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, n)) + `"}}`
	}
	body := func(blocks ...string) string {
		return `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":[{"type":"text","text":"look"}` + strings.Join(append([]string{""}, blocks...), ",") + `]}]}`
	}
	tests := map[string]struct {
		body, want string
	}{
		"one":  {body(img("image/png", 68)), Marker + "saw 1 image (image/png, 68 bytes)\n" + Marker + "messages=1 you said: look"},
		"two":  {body(img("image/png", 3), img("image/webp", 9000)), Marker + "saw 2 images (image/png, 3 bytes; image/webp, 9000 bytes)\n" + Marker + "messages=1 you said: look"},
		"none": {body(), Marker + "messages=1 you said: look"},
	}
	plain := getMessage(t, srv, body())
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := getMessage(t, srv, tc.body)
			if len(m.Content) != 1 || m.Content[0].Text != tc.want {
				t.Fatalf("content %+v, want %q", m.Content, tc.want)
			}
			if name != "none" && m.Usage["input_tokens"] <= plain.Usage["input_tokens"] {
				t.Errorf("input tokens %d with images, %d without", m.Usage["input_tokens"], plain.Usage["input_tokens"])
			}
		})
	}
}
