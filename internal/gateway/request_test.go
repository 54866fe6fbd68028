package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
)

func TestRequestModel(t *testing.T) {
	tests := map[string]struct {
		body, want string
	}{
		"plain":              {requestBody, "claude-req-model"},
		"model last":         {`{"messages":[{"role":"user","content":[{"type":"text","text":"}{]["}]}],"model":"m"}`, "m"},
		"escaped quotes":     {`{"system":"a \"model\": \"x\" \\","model":"m"}`, "m"},
		"escaped model":      {`{"model":"cl\u0061ude\n"}`, "claude\n"},
		"escaped key":        {`{"mod\u0065l":"m"}`, "m"},
		"last wins":          {`{"model":"a","model":"b"}`, "b"},
		"nested ignored":     {`{"metadata":{"model":"x"},"tools":[{"model":"y"}]}`, ""},
		"whitespace":         {" \n{ \"max_tokens\" : 5 ,\r\n\t\"model\" :\t\"m\" } ", "m"},
		"not a string":       {`{"model":5}`, ""},
		"null":               {`{"model":null}`, ""},
		"case matters":       {`{"MODEL":"m"}`, ""},
		"empty object":       {`{}`, ""},
		"array":              {`["model","m"]`, ""},
		"truncated":          {`{"model":"m`, ""},
		"truncated after":    {`{"model":"m",`, ""},
		"unterminated value": {`{"a":{"b":1},"model":"m"`, ""},
		"empty":              {``, ""},
		"numbers and bools":  {`{"a":-1.5e3,"b":true,"c":null,"model":"m"}`, "m"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := requestModel([]byte(tc.body)); got != tc.want {
				t.Errorf("requestModel(%s) = %q, want %q", tc.body, got, tc.want)
			}
		})
	}
}

// FuzzRequestModel: on any valid JSON object, requestModel agrees with
// encoding/json; on anything else it does not panic.
func FuzzRequestModel(f *testing.F) {
	for _, s := range []string{
		requestBody, streamBody, `{"model":"a","model":"b"}`, `{"x":"\\\"","model":"\u00e9"}`,
		`{"a":[{"b":"]}"}],"model":"m"}`, `{"model":1}`, `{"model":"m"`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := requestModel(body)
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil || m == nil {
			return
		}
		var want string
		if raw, ok := m["model"]; ok {
			if json.Unmarshal(raw, &want) != nil {
				want = ""
			}
		}
		if got != want {
			t.Fatalf("requestModel = %q, encoding/json says %q", got, want)
		}
	})
}

func BenchmarkRequestModel(b *testing.B) {
	body := []byte(`{"max_tokens":1024,"messages":[{"role":"user","content":"` +
		strings.Repeat(`lorem \"ipsum\" `, 16<<10) + `"}],"model":"claude-req-model"}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if requestModel(body) != "claude-req-model" {
			b.Fatal("wrong model")
		}
	}
}

func TestModelName(t *testing.T) {
	for _, s := range []string{"claude-sonnet-4-5", "claude-3-5-haiku@20241022", "anthropic.claude-v2:1", strings.Repeat("m", contract.MaxModelName)} {
		if !contract.ValidModelName(s) {
			t.Errorf("contract.ValidModelName(%q) = false, want true", s)
		}
	}
	for _, s := range []string{"", "a\x00b", "a b", "tab\t", "é", "a\nb", "\x7f", strings.Repeat("m", contract.MaxModelName+1)} {
		if contract.ValidModelName(s) {
			t.Errorf("contract.ValidModelName(%q) = true, want false", s)
		}
	}
}

// TestBadModelRefused: a request whose model cannot be a model's name is
// a 400 that says so, and is neither forwarded nor recorded; a response
// naming such a model is charged as the requested one.
func TestBadModelRefused(t *testing.T) {
	up, hits := countedAnthropic(8)
	h := newHarness(t, up, nil)
	tok := tokenHeader(h.mint(convA))
	for _, model := range []string{"a\u0000b", "two words", strings.Repeat("x", contract.MaxModelName+1), "ünïcode"} {
		body, err := json.Marshal(map[string]any{"model": model, "max_tokens": 10, "messages": []any{}})
		if err != nil {
			t.Fatal(err)
		}
		resp := h.post(t, "/v1/messages", tok, string(body))
		got := readAll(t, resp.Body)
		h.waitServed(t)
		if resp.StatusCode != http.StatusBadRequest || decodeError(t, got) != errInvalidRequest || !strings.Contains(got, "model") {
			t.Errorf("model %q: status %d, body %s; want a 400 invalid_request_error about the model", model, resp.StatusCode, got)
		}
	}
	if len(hits) != 0 {
		t.Errorf("%d refused requests reached the upstream", len(hits))
	}
	h.flush(t)
	if n := len(h.store.records()); n != 0 {
		t.Errorf("%d usage records for refused requests", n)
	}
	if u, ok := jsonUsage([]byte(`{"model":"bad\u0000name","usage":{"input_tokens":3}}`)); !ok || u.Model != "" || u.InputTokens != 3 {
		t.Errorf("jsonUsage of a response naming a bad model = %+v, %v; want its usage without the model", u, ok)
	}
}

func TestScanRequestRepeated(t *testing.T) {
	tests := map[string]struct {
		body string
		want scanned
	}{
		"none":                {`{"model":"m","max_tokens":5,"metadata":{"model":"x"}}`, scanned{model: "m", maxTokens: 5}},
		"model twice":         {`{"model":"a","max_tokens":5,"model":"b"}`, scanned{model: "b", maxTokens: 5, repeated: "model"}},
		"model twice escaped": {`{"model":"a","mod\u0065l":"b"}`, scanned{model: "b", repeated: "model"}},
		"max_tokens twice":    {`{"max_tokens":1,"model":"m","max_tokens":100000}`, scanned{model: "m", maxTokens: 100000, repeated: "max_tokens"}},
		"both twice":          {`{"max_tokens":1,"max_tokens":2,"model":"a","model":"b"}`, scanned{model: "b", maxTokens: 2, repeated: "max_tokens"}},
		"other key twice":     {`{"model":"m","system":"a","system":"b"}`, scanned{model: "m"}},
		"nested twice":        {`{"model":"m","tools":[{"model":"a"},{"model":"b"}]}`, scanned{model: "m"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, scanRequest([]byte(tc.body)), cmp.AllowUnexported(scanned{})); diff != "" {
				t.Errorf("scanRequest(%s) (-want +got):\n%s", tc.body, diff)
			}
		})
	}
}

// TestRepeatedKeysRefused: a body that names its model or max_tokens twice
// could be charged, labelled and admitted as one call (the scanner takes the
// last value) and run upstream as another (a parser that takes the first);
// the gateway refuses it before it goes anywhere.
func TestRepeatedKeysRefused(t *testing.T) {
	up, hits := countedAnthropic(8)
	h := newHarness(t, up, nil)
	tok := tokenHeader(h.mint(convA))
	for _, body := range []string{
		`{"model":"claude-opus-4-1","max_tokens":10,"messages":[],"model":"claude-haiku-4-5"}`,
		`{"model":"claude-opus-4-1","mod\u0065l":"claude-haiku-4-5","max_tokens":10,"messages":[]}`,
		`{"model":"claude-haiku-4-5","max_tokens":1,"messages":[],"max_tokens":64000}`,
	} {
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			resp := h.post(t, path, tok, body)
			got := readAll(t, resp.Body)
			h.waitServed(t)
			if resp.StatusCode != http.StatusBadRequest || decodeError(t, got) != errInvalidRequest || !strings.Contains(got, "more than once") {
				t.Errorf("%s %s: status %d, body %s; want a 400 invalid_request_error naming the key", path, body, resp.StatusCode, got)
			}
		}
	}
	if len(hits) != 0 {
		t.Errorf("%d refused requests reached the upstream", len(hits))
	}
}
