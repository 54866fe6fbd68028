package gateway

import (
	"encoding/json"
	"strings"
	"testing"
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
