package anthropicsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/talkide/platform/internal/sse"
)

func TestParseRequestShapes(t *testing.T) {
	body := `{"model":"m","max_tokens":5,"stream":true,
		"system":"plain string system",
		"tools":[{"name":"Read","description":"r","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search","max_uses":3}],
		"metadata":{"user_id":"u"},"temperature":0.2,"thinking":{"type":"enabled","budget_tokens":1024},
		"messages":[{"role":"user","content":[{"type":"document","source":{}},{"type":"search_result","content":[{"type":"text","text":1}]}]},
			{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"tool_use","id":"x","name":"Read","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"x"},{"type":"text","text":"t","cache_control":null}]}]}`
	req, err := parseRequest([]byte(body), true)
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "m" || req.MaxTokens != 5 || !req.Stream || len(req.Messages) != 3 || req.cacheControl {
		t.Errorf("parsed %+v", req)
	}
	if got := req.Tools; len(got) != 2 || got[0] != "Read" || got[1] != "web_search" {
		t.Errorf("tools %q", got)
	}
	if got := req.Messages[2].Blocks; len(got) != 2 || got[0].Type != "tool_result" || got[0].Text != "" || got[1].Text != "t" {
		t.Errorf("last message blocks %+v", got)
	}
	if string(req.systemJSON) != `"plain string system"` {
		t.Errorf("systemJSON %s", req.systemJSON)
	}
}

func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":10,"stream":true,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"tools":[{"name":"t","input_schema":{}}],"messages":[{"role":"user","content":"[[tool:t {\"a\":[1]}]] [[sleep:60000]]"}]}`,
		`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","is_error":true,"content":[{"type":"text","text":"boom"}]}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"[[error:429]]"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"[[tool:nope]]"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0K"}}]}]}`,
		`{"model":"m","messages":[]}`, `[]`, `null`, `{`, `{"model":1}`, `{"max_tokens":-1}`,
	} {
		f.Add([]byte(s))
	}
	sim := New(testKey, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, needMax := range []bool{true, false} {
			req, err := parseRequest(body, needMax)
			if err != nil {
				var ae *apiError
				if !errors.As(err, &ae) || ae.Status != 400 || ae.Type != "invalid_request_error" || ae.Msg == "" {
					t.Fatalf("error %#v", err)
				}
				continue
			}
			if req.Model == "" || len(req.Messages) == 0 || (needMax && req.MaxTokens < 1) {
				t.Fatalf("accepted %+v", req)
			}
			if !needMax {
				continue
			}
			rep, err := sim.decide(req, body)
			if err != nil {
				var ae *apiError
				if !errors.As(err, &ae) || ae.Status < 400 || ae.Status > 599 {
					t.Fatalf("decide error %#v", err)
				}
				continue
			}
			checkReply(t, req, rep, len(body))
		}
	})
}

// checkReply renders rep both ways and checks the invariants of a reply.
func checkReply(t *testing.T, req *request, rep *reply, bodyLen int) {
	t.Helper()
	if len(rep.Content) == 0 || rep.Usage.OutputTokens < 1 || rep.Usage.InputTokens < 1 {
		t.Fatalf("reply %+v", rep)
	}
	if sum := rep.Usage.InputTokens + rep.Usage.CacheCreationInputTokens + rep.Usage.CacheReadInputTokens; sum != countTokens(bodyLen) {
		t.Fatalf("input tokens add up to %d, want %d", sum, countTokens(bodyLen))
	}
	for _, b := range rep.Content {
		if b.Type == "text" && (len(b.Text) < len(Marker) || b.Text[:len(Marker)] != Marker) {
			t.Fatalf("text without marker: %q", b.Text)
		}
	}
	msg, err := marshal(rep.message("msg_sim_1", req.Model))
	if err != nil || !json.Valid(msg) {
		t.Fatalf("message JSON %s: %v", msg, err)
	}
	var buf bytes.Buffer
	if err := writeStream(context.Background(), &buf, func() {}, "msg_sim_1", req.Model, rep, 0); err != nil {
		t.Fatal(err)
	}
	r := sse.NewReader(&buf, 64<<20)
	n := 0
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || !json.Valid(ev.Data) {
			t.Fatalf("event %q %s: %v", ev.Event, ev.Data, err)
		}
		n++
	}
	if n < 6 {
		t.Fatalf("%d events", n)
	}
}
