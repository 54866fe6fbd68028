package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// feed writes stream to a fresh parser in chunks of n bytes (all at once
// when n <= 0) and returns the parser.
func feed(stream []byte, n int) *sseUsage {
	var p sseUsage
	if n <= 0 {
		n = len(stream) + 1
	}
	for len(stream) > 0 {
		k := min(n, len(stream))
		p.Write(stream[:k])
		stream = stream[k:]
	}
	return &p
}

// feedSSE is the usage feed read.
func feedSSE(stream []byte, n int) usage { return feed(stream, n).Usage() }

// feedRunning is the running usage feed read (content estimate included).
func feedRunning(stream []byte, n int) usage { return feed(stream, n).Running() }

func TestDeltaChars(t *testing.T) {
	tests := map[string]int64{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`:                    5,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\": 1}"}}`: 10,
		`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`:              3,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}`:   0,
		`{"delta":{"text":"a","thinking":"bc"},"index":0}`:                                                         3,
		`{"delta":{"text":`: 0,
		`not json`:          0,
	}
	for in, want := range tests {
		if got := deltaChars([]byte(in)); got != want {
			t.Errorf("deltaChars(%s) = %d, want %d", in, got, want)
		}
	}
}

func TestSSEUsage(t *testing.T) {
	start := func(usage string) string {
		return "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m1\",\"usage\":" + usage + "}}\n\n"
	}
	delta := func(usage string) string {
		return "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{},\"usage\":" + usage + "}\n\n"
	}
	tests := map[string]struct {
		stream string
		want   usage
	}{
		"canned":       {cannedStream, cannedStreamUsage},
		"crlf":         {strings.ReplaceAll(cannedStream, "\n", "\r\n"), cannedStreamUsage},
		"start only":   {cannedEvents[0], cannedStartUsage},
		"cut off last": {cannedEvents[0] + strings.TrimSuffix(cannedEvents[6], "\n"), cannedStartUsage},
		"delta reports input": {
			start(`{"input_tokens":0,"output_tokens":1}`) + delta(`{"input_tokens":30,"cache_read_input_tokens":5,"output_tokens":9}`),
			usage{Model: "m1", InputTokens: 30, CacheReadInputTokens: 5, OutputTokens: 9},
		},
		"delta zero input keeps start": {
			start(`{"input_tokens":11,"cache_creation_input_tokens":2,"output_tokens":1}`) + delta(`{"input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":4}`),
			usage{Model: "m1", InputTokens: 11, CacheCreationInputTokens: 2, OutputTokens: 4},
		},
		"output cumulative, last wins": {
			start(`{"input_tokens":1,"output_tokens":1}`) + delta(`{"output_tokens":5}`) + delta(`{"output_tokens":8}`),
			usage{Model: "m1", InputTokens: 1, OutputTokens: 8},
		},
		"negative is zero": {
			start(`{"input_tokens":-5,"output_tokens":-1}`) + delta(`{"input_tokens":-3,"output_tokens":-2}`),
			usage{Model: "m1"},
		},
		"unnamed events by type": {
			"data: {\"type\":\"message_start\",\"message\":{\"model\":\"m2\",\"usage\":{\"input_tokens\":3}}}\n\n" +
				"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4}}\n\n",
			usage{Model: "m2", InputTokens: 3, OutputTokens: 4},
		},
		"comments, no space, extra fields": {
			": ping\nid: 7\nevent:message_start\nretry: 10\ndata:{\"type\":\"message_start\",\"message\":{\"model\":\"m3\",\"usage\":{\"input_tokens\":6}}}\n\n",
			usage{Model: "m3", InputTokens: 6},
		},
		"multi-line data": {
			"event: message_delta\ndata: {\"type\":\"message_delta\",\ndata: \"usage\":{\"output_tokens\":12}}\n\n",
			usage{OutputTokens: 12},
		},
		"other events ignored": {
			"event: content_block_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":99}}\n\n",
			usage{},
		},
		"garbage json": {
			start(`{"input_tokens":"many"}`) + delta(`{"output_tokens":1.5}`) + "event: message_delta\ndata: {\n\n",
			usage{},
		},
		"huge line skipped": {
			start(`{"input_tokens":2}`) + "event: content_block_delta\ndata: " + strings.Repeat("x", maxSSELine+10) + "\n\n" + delta(`{"output_tokens":3}`),
			usage{Model: "m1", InputTokens: 2, OutputTokens: 3},
		},
		"cache split and server tools": {
			start(`{"input_tokens":5,"cache_creation_input_tokens":30,"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":20},"output_tokens":1}`) +
				delta(`{"output_tokens":9,"server_tool_use":{"web_search_requests":2,"web_fetch_requests":1}}`),
			usage{Model: "m1", InputTokens: 5, CacheCreationInputTokens: 30, CacheWrite5mTokens: 10, CacheWrite1hTokens: 20,
				OutputTokens: 9, WebSearchRequests: 2, WebFetchRequests: 1},
		},
		"huge message_delta skipped": {
			start(`{"input_tokens":2}`) + "event: message_delta\n" + strings.Repeat("data: "+strings.Repeat("y", 1000)+"\n", maxSSEData/1000+1) + "\n" + delta(`{"output_tokens":3}`),
			usage{Model: "m1", InputTokens: 2, OutputTokens: 3},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{0, 1, 2, 7, 64, 4096} {
				if diff := cmp.Diff(tc.want, feedSSE([]byte(tc.stream), n)); diff != "" {
					t.Errorf("chunks of %d (-want +got):\n%s", n, diff)
				}
			}
		})
	}
}

func TestJSONUsage(t *testing.T) {
	tests := map[string]struct {
		body   string
		want   usage
		wantOK bool
	}{
		"message":        {cannedJSON, cannedJSONUsage, true},
		"error":          {`{"type":"error","error":{"type":"api_error","message":"x"}}`, usage{}, true},
		"count tokens":   {`{"input_tokens":42}`, usage{}, true},
		"negative":       {`{"model":"m","usage":{"input_tokens":-1,"output_tokens":3}}`, usage{Model: "m", OutputTokens: 3}, true},
		"not json":       {`<html>`, usage{}, false},
		"truncated":      {cannedJSON[:len(cannedJSON)-10], usage{}, false},
		"empty":          {``, usage{}, false},
		"array":          {`[]`, usage{}, false},
		"null usage":     {`{"model":"m","usage":null}`, usage{Model: "m"}, true},
		"float overflow": {`{"usage":{"input_tokens":1e40}}`, usage{}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := jsonUsage([]byte(tc.body))
			if ok != tc.wantOK {
				t.Errorf("ok = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMeterJSONCap(t *testing.T) {
	m := newMeter(http.Header{"Content-Type": {"application/json"}})
	body := `{"model":"m","pad":"` + strings.Repeat("p", maxJSONCapture) + `","usage":{"input_tokens":1}}`
	b := &meteredBody{ReadCloser: io.NopCloser(strings.NewReader(body)), m: m}
	got, err := io.ReadAll(b)
	if err != nil || string(got) != body {
		t.Fatalf("body changed in passing (%v)", err)
	}
	if u := m.usage(); u != (usage{}) || m.body.Len() != 0 {
		t.Errorf("over the cap: usage %+v, holding %d bytes; want nothing", u, m.body.Len())
	}
}

func FuzzUsageParser(f *testing.F) {
	f.Add([]byte(cannedStream), uint16(3))
	f.Add([]byte(strings.ReplaceAll(cannedStream, "\n", "\r\n")), uint16(1))
	f.Add([]byte(cannedJSON), uint16(10))
	f.Add([]byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-9,\"input_tokens\":-1}}\n\n"), uint16(0))
	f.Add([]byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9223372036854775807}}}\n\n"), uint16(5))
	f.Add([]byte(": c\n\n\n\ndata\nevent\n:\n\r\n"), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint16) {
		whole := feedSSE(data, 0)
		if u := whole; u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheCreationInputTokens < 0 || u.CacheReadInputTokens < 0 {
			t.Fatalf("negative usage %+v", u)
		}
		// How the stream is cut into reads must not matter.
		if got := feedSSE(data, int(chunk)); got != whole {
			t.Fatalf("chunks of %d: %+v, whole: %+v", chunk, got, whole)
		}
		if a, b := feedRunning(data, 0), feedRunning(data, int(chunk)); a != b {
			t.Fatalf("running usage: chunks of %d: %+v, whole: %+v", chunk, b, a)
		}
		u, _ := jsonUsage(data)
		if u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheCreationInputTokens < 0 || u.CacheReadInputTokens < 0 {
			t.Fatalf("negative JSON usage %+v", u)
		}
	})
}

func BenchmarkSSEUsage(b *testing.B) {
	// A long answer: many small deltas between message_start and message_delta.
	var sb strings.Builder
	sb.WriteString(cannedEvents[0])
	for range 2000 {
		sb.WriteString(cannedEvents[3])
	}
	sb.WriteString(cannedEvents[6])
	stream := []byte(sb.String())
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		var p sseUsage
		for s := stream; len(s) > 0; {
			k := min(32<<10, len(s))
			p.Write(s[:k])
			s = s[k:]
		}
		if p.Usage().OutputTokens != 15 {
			b.Fatal("wrong usage")
		}
	}
}

// BenchmarkSSEUsageEvents prices what the meter does with the two events
// that carry usage, on the path of a stream's first and last bytes, by the
// scanner and by encoding/json.
func BenchmarkSSEUsageEvents(b *testing.B) {
	// The data of the events of hotpath_bench_test.go's eventsOf.
	start := []byte(`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-6","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":4000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`)
	delta := []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":250}}`)
	for _, bc := range []struct {
		name     string
		dispatch func(*sseUsage)
	}{{"scan", (*sseUsage).dispatch}, {"json", (*sseUsage).dispatchJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p := sseUsage{data: start}
				bc.dispatch(&p)
				p.data = delta
				bc.dispatch(&p)
				if p.u.OutputTokens != 250 || p.u.InputTokens != 4000 || !p.final {
					b.Fatalf("wrong usage %+v", p.u)
				}
			}
		})
	}
}

func BenchmarkJSONUsage(b *testing.B) {
	body := []byte(cannedJSON)
	for _, bc := range []struct {
		name      string
		jsonUsage func([]byte) (usage, bool)
	}{{"scan", jsonUsage}, {"json", jsonUsageJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if u, ok := bc.jsonUsage(body); !ok || u.OutputTokens != 6 {
					b.Fatal("wrong usage")
				}
			}
		})
	}
}
