package gateway

import (
	"strings"
	"testing"
)

// Events as Anthropic sends them, the data of eventsOf
// (hotpath_bench_test.go) and of the simulator among them.
var realEvents = []string{
	`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-6","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":4000,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":250}}`,
	`{"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-opus-4-1-20250805","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":1200,"cache_read_input_tokens":30000,"cache_creation":{"ephemeral_5m_input_tokens":200,"ephemeral_1h_input_tokens":1000},"output_tokens":3,"service_tier":"standard","server_tool_use":{"web_search_requests":0,"web_fetch_requests":0}},"container":null}}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null,"container":null},"usage":{"input_tokens":2095,"cache_creation_input_tokens":1200,"cache_read_input_tokens":30000,"output_tokens":503,"server_tool_use":{"web_search_requests":2,"web_fetch_requests":1}},"context_management":{"applied_edits":[]}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":17,"output_tokens":42,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
	`{"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-3-5-sonnet-20241022", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the gateway checks"}}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}`,
	`{"type": "ping"}`,
	`{"type":"message_stop"}`,
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
}

// Response bodies as Anthropic sends them.
var realBodies = []string{
	`{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-6","content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":6}}`,
	`{"id":"msg_02","type":"message","role":"assistant","model":"claude-opus-4-1-20250805","content":[{"type":"text","text":"Caf\u00e9 \ud83d\ude00 \"quoted\" \\ done\nnext line"},{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"weather"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","url":"https://example.com","title":"É","encrypted_content":"EqgfCioIARgBIiQ3YTAw","page_age":null}]},{"type":"tool_use","id":"toolu_01","name":"calc","input":{"a":[1,2.5,-3e2,{"b":[true,false,null]}]}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":1200,"cache_read_input_tokens":30000,"cache_creation":{"ephemeral_5m_input_tokens":200,"ephemeral_1h_input_tokens":1000},"output_tokens":503,"service_tier":"standard","server_tool_use":{"web_search_requests":1,"web_fetch_requests":0}},"container":null}`,
	`{"input_tokens":42}`,
	`{"type":"error","error":{"type":"api_error","message":"x"}}`,
}

// Data that tries the corners of encoding/json's decoding.
var scanSeeds = []string{
	// Keys in other cases, with escapes, folding to ASCII from beyond it.
	`{"Type":"message_start","MESSAGE":{"Model":"m","Usage":{"Input_Tokens":5,"OUTPUT_TOKENS":2,"Cache_Creation":{"EPHEMERAL_5M_INPUT_TOKENS":3},"SERVER_tool_USE":{"Web_Search_Requests":1}}}}`,
	`{"TYPE":"message_delta","USAGE":{"output_tokens":3}}`,
	`{"type":"message_delta","\u0075sage":{"output_tokens":7}}`,
	`{"type":"message_delta","usage":{"output_to\u006bens":7}}`,
	"{\"type\":\"message_delta\",\"usage\":{\"output_to\u212aens\":7}}",
	"{\"type\":\"message_delta\",\"usage\":{\"output_token\u017f\":7}}",
	`{"type":"message_delta","usage":{"output_to\u212aens":7}}`,
	"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\xff\":7}}",
	`{"typ\u0065":"message_delta","usage":{"output_tokens":7}}`,
	`{"type":"message\u005fdelta","usage":{"output_tokens":7}}`,
	`{"type":"MESSAGE_DELTA","usage":{"output_tokens":7}}`,
	"{\"type\":\"message_delta\xff\",\"usage\":{\"output_tokens\":7}}",
	// Models.
	`{"type":"message_start","message":{"model":"claude\u002dx","usage":{}}}`,
	`{"type":"message_start","message":{"model":"bad\u0000name"}}`,
	`{"type":"message_start","message":{"model":"caf\u00e9"}}`,
	"{\"type\":\"message_start\",\"message\":{\"model\":\"caf\xc3\xa9\"}}",
	"{\"type\":\"message_start\",\"message\":{\"model\":\"bad\xff\"}}",
	"{\"type\":\"message_start\",\"message\":{\"model\":\"a\x7fb\"}}",
	`{"type":"message_start","message":{"model":"with space"}}`,
	`{"type":"message_start","message":{"model":""}}`,
	`{"type":"message_start","message":{"model":"` + strings.Repeat("m", 300) + `"}}`,
	`{"type":"message_start","message":{"model":"a","model":null}}`,
	`{"type":"message_start","message":{"model":"a","model":"b"}}`,
	`{"type":"message_start","message":{"model":"a","model":"bad name"}}`,
	`{"type":"message_start","message":{"model":5}}`,
	`{"type":"message_start","message":{"model":{}}}`,
	`{"type":"message_start","message":{"model":["m"]}}`,
	`{"type":"message_start","model":"top","message":{}}`,
	`{"model":"m","usage":null}`,
	`{"model":null,"model":"m"}`,
	`{"Model":"m","USAGE":{"input_tokens":1}}`,
	// Repeated keys: the last wins; objects merge; null clears.
	`{"type":"message_delta","usage":{"input_tokens":1},"usage":{"output_tokens":2}}`,
	`{"type":"message_delta","usage":{"input_tokens":1},"usage":null}`,
	`{"type":"message_delta","usage":{"input_tokens":1},"usage":null,"usage":{"output_tokens":2}}`,
	`{"type":"message_delta","usage":{"input_tokens":1,"input_tokens":null}}`,
	`{"type":"message_delta","usage":{"input_tokens":null,"input_tokens":4}}`,
	`{"type":"message_delta","usage":{"cache_creation":{"ephemeral_5m_input_tokens":1},"cache_creation":{"ephemeral_1h_input_tokens":2}}}`,
	`{"type":"message_delta","usage":{"cache_creation":{"ephemeral_5m_input_tokens":1},"cache_creation":null,"cache_creation":{"ephemeral_1h_input_tokens":2}}}`,
	`{"type":"message_delta","usage":{"server_tool_use":{"web_search_requests":1},"server_tool_use":null}}`,
	`{"type":"message_start","message":{"model":"a","usage":{"input_tokens":1}},"message":{"usage":{"output_tokens":2}}}`,
	`{"type":"message_start","message":{"model":"a","usage":{"input_tokens":1}},"message":null,"message":{"usage":{"output_tokens":2}}}`,
	`{"type":"message_start","message":{"model":"a"},"message":null}`,
	`{"type":"message_start","message":{"usage":{"input_tokens":1},"usage":null}}`,
	`{"type":"message_start","type":null,"message":{"model":"a"}}`,
	`{"type":"message_start","type":"ping","message":{"model":"a"}}`,
	`{"type":null,"type":"message_delta","usage":{"output_tokens":1}}`,
	`{"message":{"model":"a"},"type":"message_start"}`,
	`{"usage":{"output_tokens":1},"type":"message_delta"}`,
	// Counts.
	`{"type":"message_delta","usage":{"output_tokens":null}}`,
	`{"type":"message_delta","usage":{"output_tokens":-0}}`,
	`{"type":"message_delta","usage":{"output_tokens":-5,"input_tokens":-1}}`,
	`{"type":"message_delta","usage":{"output_tokens":"5"}}`,
	`{"type":"message_delta","usage":{"output_tokens":1.0}}`,
	`{"type":"message_delta","usage":{"output_tokens":1e3}}`,
	`{"type":"message_delta","usage":{"output_tokens":1E3}}`,
	`{"type":"message_delta","usage":{"output_tokens":01}}`,
	`{"type":"message_delta","usage":{"output_tokens":-01}}`,
	`{"type":"message_delta","usage":{"output_tokens":-}}`,
	`{"type":"message_delta","usage":{"output_tokens":+1}}`,
	`{"type":"message_delta","usage":{"output_tokens":9223372036854775807}}`,
	`{"type":"message_delta","usage":{"output_tokens":9223372036854775808}}`,
	`{"type":"message_delta","usage":{"output_tokens":-9223372036854775808}}`,
	`{"type":"message_delta","usage":{"output_tokens":-9223372036854775809}}`,
	`{"type":"message_delta","usage":{"output_tokens":99999999999999999999999}}`,
	`{"type":"message_delta","usage":{"output_tokens":true}}`,
	`{"type":"message_delta","usage":{"output_tokens":{}}}`,
	`{"type":"message_delta","usage":{"output_tokens":[]}}`,
	`{"type":"message_delta","usage":{"output_tokens":nul}}`,
	`{"type":"message_delta","usage":{"output_tokens":0,"input_tokens":0,"cache_read_input_tokens":0}}`,
	`{"type":"message_delta","usage":{"cache_creation":{"ephemeral_5m_input_tokens":2.5}}}`,
	`{"type":"message_delta","usage":{"server_tool_use":{"web_fetch_requests":"1"}}}`,
	// Objects of the wrong type.
	`{"type":"message_start","message":5}`,
	`{"type":"message_start","message":[]}`,
	`{"type":"message_start","message":"m"}`,
	`{"type":"message_start","message":true}`,
	`{"type":"message_delta","usage":"x"}`,
	`{"type":"message_delta","usage":[{"output_tokens":1}]}`,
	`{"type":"message_delta","usage":{"cache_creation":5}}`,
	`{"type":"message_delta","usage":{"server_tool_use":[]}}`,
	`{"type":5,"usage":{"output_tokens":1}}`,
	`{"type":true}`,
	`{"type":{},"usage":{"output_tokens":1}}`,
	`{"type":["message_delta"]}`,
	// A type mismatch in a field of an event the meter then ignores.
	`{"type":"ping","usage":{"output_tokens":"x"}}`,
	`{"type":"message_start","usage":{"output_tokens":1.5},"message":{"model":"m"}}`,
	`{"type":"message_delta","message":{"usage":5},"usage":{"output_tokens":1}}`,
	// Whitespace everywhere.
	" \t\r\n{ \"type\" :\t\"message_delta\" ,\r\n\"usage\" : { \"output_tokens\" : 3 , \"cache_creation\" : { } } } \n",
	" {\"type\":\"message_start\",\"message\": { \"model\" : \"m\" , \"usage\" : { \"input_tokens\" :\n2 } } }\t",
	"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\f",
	"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\v",
	"\u00a0{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}",
	// Not JSON, somewhere.
	`{"type":"message_delta","usage":{"output_tokens":3,}}`,
	`{"type":"message_delta","usage":{"output_tokens":3},}`,
	`{"type":"message_delta",,"usage":{"output_tokens":3}}`,
	`{"type":"message_delta","usage":{"output_tokens":3}}x`,
	`{"type":"message_delta","usage":{"output_tokens":3}}}`,
	`{"type":"message_delta","usage":{"output_tokens":3}}{}`,
	`{"type":"message_delta","usage":{"output_tokens":3}`,
	`{"type":"message_delta","usage":{"output_tokens":3}} null`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":"\q"}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":"\u12g4"}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":"\u12"}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":"\"}`,
	"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3},\"x\":\"a\tb\"}",
	"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3},\"x\":\"a\x00b\"}",
	"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3},\"x\":\"a\x7f\xff\xfe\"}",
	"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3},\"x\xff\":1}",
	"{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3},\"x\n\":1}",
	`{"type":"message_delta","usage":{"output_tokens":3},"x":"\ud800"}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":-}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":1.}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":.5}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":1e}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":1e+}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":-1.5E-7}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":0x10}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":00}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":NaN}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":tru}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":truefalse}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":[1,]}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":[,1]}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":[1 2]}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":{"a"}}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":{"a":1,"b"}}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":{1:2}}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":[}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":{]}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x"}`,
	`{"type":"message_delta","usage":{"output_tokens":3},"x":}`,
	`{"type":"message_delta","usage":{"output_tokens":3}"x":1}`,
	`{"type":"message_delta","usage":{"output_tokens":3},'x':1}`,
	`{"type":"message_delta","usage":{"output_tokens" 3}}`,
	`{"type":"message_delta","usage":{output_tokens:3}}`,
	// Nesting: deep, and deeper than encoding/json allows.
	`{"type":"message_delta","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `,"usage":{"output_tokens":1}}`,
	`{"type":"message_delta","x":` + strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70) + `,"usage":{"output_tokens":1}}`,
	`{"type":"message_delta","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"usage":{"output_tokens":1}}`,
	`{"type":"message_delta","usage":{"output_tokens":1,"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}`,
	// Not an object.
	``, ` `, `null`, ` null `, `nul`, `[]`, `[{"type":"message_delta"}]`, `"message_delta"`, `5`, `true`, `{}`, `{`, `}`, `{"type"`,
	`{"type":"message_delta"}`,
}

// busyUsage is usage that every field of an event changes, if it applies.
var busyUsage = usage{Model: "m0", InputTokens: 7, OutputTokens: 7, CacheCreationInputTokens: 7, CacheReadInputTokens: 7,
	CacheWrite5mTokens: 7, CacheWrite1hTokens: 7, WebSearchRequests: 7, WebFetchRequests: 7}

// allSeeds returns the seeds, with every prefix of the real events and
// bodies (streams and bodies cut off).
func allSeeds() []string {
	seeds := append(append(append([]string(nil), realEvents...), realBodies...), scanSeeds...)
	for _, s := range append(append([]string(nil), realEvents[:4]...), realBodies[:2]...) {
		for i := range len(s) {
			seeds = append(seeds, s[:i])
		}
	}
	return seeds
}

// sameDispatch checks that dispatch leaves the meter as dispatchJSON does,
// from an empty usage and from a full one.
func sameDispatch(t *testing.T, data []byte) {
	t.Helper()
	for _, before := range []usage{{}, busyUsage} {
		got := sseUsage{u: before, data: data}
		want := sseUsage{u: before, data: data}
		got.dispatch()
		want.dispatchJSON()
		if got.u != want.u || got.final != want.final {
			t.Fatalf("%q from %+v:\nscanner:       %+v final %v\nencoding/json: %+v final %v", data, before, got.u, got.final, want.u, want.final)
		}
	}
}

// sameJSONUsage checks that jsonUsage answers as jsonUsageJSON does.
func sameJSONUsage(t *testing.T, body []byte) {
	t.Helper()
	got, gotOK := jsonUsage(body)
	want, wantOK := jsonUsageJSON(body)
	if got != want || gotOK != wantOK {
		t.Fatalf("%q:\nscanner:       %+v %v\nencoding/json: %+v %v", body, got, gotOK, want, wantOK)
	}
}

func TestScanMatchesJSON(t *testing.T) {
	for _, s := range allSeeds() {
		sameDispatch(t, []byte(s))
		sameJSONUsage(t, []byte(s))
	}
}

// FuzzSSEDispatchMatchesJSON holds dispatch's scanner to encoding/json's
// answer, on any data.
func FuzzSSEDispatchMatchesJSON(f *testing.F) {
	for _, s := range allSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { sameDispatch(t, data) })
}

// FuzzJSONUsageMatchesJSON holds jsonUsage's scanner to encoding/json's
// answer, on any body.
func FuzzJSONUsageMatchesJSON(f *testing.F) {
	for _, s := range allSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { sameJSONUsage(t, body) })
}

// TestScanAnswersItself checks that what Anthropic sends is read by the
// scanner, not by encoding/json after it, and what the scanner reads of
// the corners it takes on.
func TestScanAnswersItself(t *testing.T) {
	for _, s := range realEvents {
		var ev event
		if !ev.scan([]byte(s), false) {
			t.Errorf("event left to encoding/json: %s", s)
		}
	}
	for _, s := range realBodies {
		var ev event
		if !ev.scan([]byte(s), true) {
			t.Errorf("body left to encoding/json: %s", s)
		}
	}
	tests := []struct {
		data string
		want usage
	}{
		{realEvents[2], usage{Model: "claude-opus-4-1-20250805", InputTokens: 2095, OutputTokens: 3, CacheCreationInputTokens: 1200,
			CacheReadInputTokens: 30000, CacheWrite5mTokens: 200, CacheWrite1hTokens: 1000}},
		{realEvents[3], usage{InputTokens: 2095, OutputTokens: 503, CacheCreationInputTokens: 1200, CacheReadInputTokens: 30000,
			WebSearchRequests: 2, WebFetchRequests: 1}},
		{`{"Type":"message_start","MESSAGE":{"Model":"m","Usage":{"Input_Tokens":5,"CACHE_creation":{"ephemeral_1H_input_tokens":3}}}}`,
			usage{Model: "m", InputTokens: 5, CacheWrite1hTokens: 3}},
		{`{"type":"message_delta","usage":{"input_tokens":1},"usage":{"output_tokens":2}}`, usage{InputTokens: 1, OutputTokens: 2}},
		{`{"type":"message_delta","usage":{"input_tokens":1},"usage":null,"usage":{"output_tokens":2}}`, usage{OutputTokens: 2}},
		{`{"type":"message_delta","usage":{"input_tokens":1},"usage":null}`, usage{}},
		{`{"type":"message_delta","usage":{"input_tokens":1,"input_tokens":null}}`, usage{}},
		{`{"type":"message_start","message":{"model":"a","usage":{"input_tokens":1}},"message":{"model":null,"usage":{"output_tokens":2}}}`,
			usage{Model: "a", InputTokens: 1, OutputTokens: 2}},
		{`{"type":"message_start","message":{"model":"a","usage":{"input_tokens":1}},"message":null,"message":{"usage":{"output_tokens":2}}}`,
			usage{OutputTokens: 2}},
		{`{"type":"message_start","type":null,"message":{"model":"a"}}`, usage{Model: "a"}},
		{`{"type":"message_delta","usage":{"output_tokens":-0,"input_tokens":-4}}`, usage{}},
	}
	for _, tc := range tests {
		var ev event
		if !ev.scan([]byte(tc.data), false) {
			t.Errorf("left to encoding/json: %s", tc.data)
			continue
		}
		p := sseUsage{data: []byte(tc.data)}
		p.dispatch()
		if p.u != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.data, p.u, tc.want)
		}
	}
}

// TestDispatchAllocations checks that reading the usage of a stream
// allocates only the model's name.
func TestDispatchAllocations(t *testing.T) {
	start, delta := []byte(realEvents[2]), []byte(realEvents[3])
	var p sseUsage
	if n := testing.AllocsPerRun(100, func() {
		p = sseUsage{data: start}
		p.dispatch()
		p.data = delta
		p.dispatch()
	}); n > 1 {
		t.Errorf("%v allocations per stream, want at most 1", n)
	}
	body := []byte(realBodies[1])
	if n := testing.AllocsPerRun(100, func() { jsonUsage(body) }); n > 1 {
		t.Errorf("%v allocations per body, want at most 1", n)
	}
}
