package anthropicsim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/sse"
)

// streamEvent is the union of the streaming event fields, decoded strictly.
type streamEvent struct {
	Type         string       `json:"type"`
	Message      *testMessage `json:"message"`
	Index        *int         `json:"index"`
	ContentBlock *testBlock   `json:"content_block"`
	Delta        *struct {
		Type         string  `json:"type"`
		Text         *string `json:"text"`
		PartialJSON  *string `json:"partial_json"`
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage map[string]int `json:"usage"`
}

// readStream posts body and returns the events and the Message they build.
func readStream(t *testing.T, srv *httptest.Server, body string) ([]string, testMessage, []streamEvent) {
	t.Helper()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages?beta=true", strings.NewReader(body))
	req.Header.Set("x-api-key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var names []string
	var events []streamEvent
	var m testMessage
	r := sse.NewReader(resp.Body, 1<<20)
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var se streamEvent
		decodeStrict(t, ev.Data, &se)
		if se.Type != ev.Event {
			t.Errorf("event %q carries type %q", ev.Event, se.Type)
		}
		names = append(names, ev.Event)
		events = append(events, se)
		switch ev.Event {
		case "message_start":
			m = *se.Message
		case "content_block_start":
			if *se.Index != len(m.Content) {
				t.Fatalf("content_block_start index %d, want %d", *se.Index, len(m.Content))
			}
			m.Content = append(m.Content, *se.ContentBlock)
		case "content_block_delta":
			b := &m.Content[*se.Index]
			switch se.Delta.Type {
			case "text_delta":
				b.Text += *se.Delta.Text
			case "input_json_delta":
				if string(b.Input) == "{}" {
					b.Input = nil
				}
				b.Input = append(b.Input, *se.Delta.PartialJSON...)
			default:
				t.Errorf("delta type %q", se.Delta.Type)
			}
		case "message_delta":
			m.StopReason = se.Delta.StopReason
			m.Usage = se.Usage
		}
	}
	return names, m, events
}

// eventGrammar is the order the real API sends events in.
var eventGrammar = regexp.MustCompile(`^message_start ping (content_block_start (content_block_delta )+content_block_stop )+message_delta message_stop $`)

func TestStreamMatchesNonStreaming(t *testing.T) {
	_, srv := newServer(t, nil)
	long := `{"command":"go test ./... -run 'TestX' -count=1","description":"run the tests ünïcödé"}`
	tests := map[string]string{
		"echo":            userBody("tell me a story about a very small simulator that could"),
		"tool_use":        userBody("first I will look [[tool:Bash "+long+"]] [[tool:Read {}]]", "Bash", "Read"),
		"not offered":     userBody("[[tool:Write {}]]"),
		"max_tokens":      strings.Replace(userBody(strings.Repeat("many words ", 50)), `"max_tokens":1024`, `"max_tokens":20`, 1),
		"malformed":       userBody("[[sleep:abc]]"),
		"html characters": userBody("<script>&amp;</script>"),
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			want := getMessage(t, srv, body)
			streamBody := strings.Replace(body, `{"max_tokens"`, `{"stream":true,"max_tokens"`, 1)
			names, got, events := readStream(t, srv, streamBody)
			if !eventGrammar.MatchString(strings.Join(names, " ") + " ") {
				t.Errorf("event sequence %v", names)
			}
			if events[0].Message.Usage["output_tokens"] != 1 || len(events[0].Message.Content) != 0 || events[0].Message.StopReason != nil {
				t.Errorf("message_start %+v", events[0].Message)
			}
			want.ID, got.ID = "", ""
			want.Usage["input_tokens"] = (len(streamBody) + 3) / 4 // the body is longer by "stream":true,
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("streamed message differs from non-streamed (-want +got):\n%s", diff)
			}
			for _, ev := range events {
				switch {
				case ev.Type == "content_block_start" && ev.ContentBlock.Type == "tool_use" && string(ev.ContentBlock.Input) != "{}":
					t.Errorf("tool_use start input %s, want {}", ev.ContentBlock.Input)
				case ev.Type == "content_block_start" && ev.ContentBlock.Type == "text" && ev.ContentBlock.Text != "":
					t.Errorf("text start %q, want empty", ev.ContentBlock.Text)
				case ev.Type == "message_delta" && (ev.Delta.StopSequence != nil || ev.Delta.StopReason == nil):
					t.Errorf("message_delta %+v", ev.Delta)
				}
			}
		})
	}
}

func TestStreamDeltaSizes(t *testing.T) {
	_, srv := newServer(t, nil)
	body := strings.Replace(userBody(`one two three four five six seven [[tool:t {"k":"a value long enough to split"}]]`, "t"),
		`{"max_tokens"`, `{"stream":true,"max_tokens"`, 1)
	_, _, events := readStream(t, srv, body)
	var texts, jsons []string
	for _, ev := range events {
		if ev.Type != "content_block_delta" {
			continue
		}
		if ev.Delta.Text != nil {
			texts = append(texts, *ev.Delta.Text)
		} else {
			jsons = append(jsons, *ev.Delta.PartialJSON)
		}
	}
	wantTexts := []string{"[simulator] one two ", "three four five ", "six seven"}
	if diff := cmp.Diff(wantTexts, texts); diff != "" {
		t.Errorf("text deltas (-want +got):\n%s", diff)
	}
	if len(jsons) < 2 || strings.Join(jsons, "") != `{"k":"a value long enough to split"}` {
		t.Errorf("partial_json pieces %q", jsons)
	}
}

func TestPieces(t *testing.T) {
	for _, s := range []string{"", "a", "  lead and trail  ", "one\ttwo\nthree four", "ééé ààà", strings.Repeat("x", 100)} {
		if got := strings.Join(textPieces(s, 3), ""); got != s {
			t.Errorf("textPieces(%q) joins to %q", s, got)
		}
	}
	for _, s := range []string{"{}", `{"a":"é"}`, `{"ü":"` + strings.Repeat("ß", 40) + `"}`} {
		p := jsonPieces(s)
		if strings.Join(p, "") != s || len(p) < 2 {
			t.Errorf("jsonPieces(%q) = %q", s, p)
		}
		for _, x := range p {
			if !isValidUTF8(x) || len(x) > maxJSONDelta+3 {
				t.Errorf("jsonPieces(%q): bad piece %q", s, x)
			}
		}
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// TestStreamSleepStopsWhenClientGoes checks that a [[sleep:60000]] stream ends
// as soon as the client cancels, rather than after the pause.
func TestStreamSleepStopsWhenClientGoes(t *testing.T) {
	sim := New(testKey, nil)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		sim.ServeHTTP(w, r)
	}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := strings.Replace(userBody("slow please [[sleep:60000]]"), `{"max_tokens"`, `{"stream":true,"max_tokens"`, 1)
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	var seen []string
	for len(seen) < 3 { // message_start, ping, content_block_start arrive before the first pause
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("after %v: %v", seen, err)
		}
		seen = append(seen, ev.Event)
	}
	if diff := cmp.Diff([]string{"message_start", "ping", "content_block_start"}, seen); diff != "" {
		t.Errorf("events before the pause (-want +got):\n%s", diff)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("handler still sleeping 10s after the client went away")
	}
}

func TestChunkDelayAndSleepPace(t *testing.T) {
	tests := map[string]struct {
		delay time.Duration
		text  string
		min   time.Duration
		max   time.Duration
	}{
		// "[simulator] messages=1 you said: a b c d" is 3 text deltas, and
		// "[simulator] messages=1 you said: [[sleep:30]] c" 2.
		"ChunkDelay":         {20 * time.Millisecond, "a b c d", 60 * time.Millisecond, time.Minute},
		"sleep directive":    {0, "[[sleep:30]] c", 60 * time.Millisecond, time.Minute},
		"sleep overrides it": {2 * time.Second, "[[sleep:1]] c", 0, 1500 * time.Millisecond},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, srv := newServer(t, &Options{ChunkDelay: tt.delay})
			start := time.Now()
			readStream(t, srv, strings.Replace(userBody(tt.text), `{"max_tokens"`, `{"stream":true,"max_tokens"`, 1))
			if el := time.Since(start); el < tt.min || el > tt.max {
				t.Errorf("stream took %v, want %v..%v", el, tt.min, tt.max)
			}
		})
	}
	t.Run("non-streaming sleep delays the answer", func(t *testing.T) {
		_, srv := newServer(t, nil)
		start := time.Now()
		getMessage(t, srv, userBody("[[sleep:50]]"))
		if el := time.Since(start); el < 50*time.Millisecond {
			t.Errorf("answer after %v", el)
		}
	})
}

func TestWriteStreamStopsOnCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var buf bytes.Buffer
	rep := &reply{Content: []contentBlock{textBlock("[simulator] x")}, StopReason: "end_turn"}
	if err := writeStream(ctx, &buf, func() {}, "msg", "m", rep, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %q", buf.String())
	}
}
