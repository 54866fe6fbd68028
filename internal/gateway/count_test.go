package gateway

import (
	"encoding/json"
	"testing"
)

// pointerUsage is wireUsage as it was with *int64 fields: what count must
// decode exactly as.
type pointerUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreation            *struct {
		Ephemeral5m *int64 `json:"ephemeral_5m_input_tokens"`
		Ephemeral1h *int64 `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
	ServerToolUse *struct {
		WebSearchRequests *int64 `json:"web_search_requests"`
		WebFetchRequests  *int64 `json:"web_fetch_requests"`
	} `json:"server_tool_use"`
}

func countOf(p *int64) count {
	if p == nil {
		return count{}
	}
	return count{v: *p, set: true}
}

// sameUsage decodes b both ways and says how they differ: whether each
// fails, and, when neither does, every count.
func sameUsage(t *testing.T, b []byte) {
	t.Helper()
	var p pointerUsage
	var c wireUsage
	perr := json.Unmarshal(b, &p)
	cerr := json.Unmarshal(b, &c)
	if (perr == nil) != (cerr == nil) {
		t.Fatalf("%s: *int64 error %v, count error %v", b, perr, cerr)
	}
	if perr != nil {
		return // the meter ignores an event that does not decode
	}
	pairs := [][2]count{
		{countOf(p.InputTokens), c.InputTokens},
		{countOf(p.OutputTokens), c.OutputTokens},
		{countOf(p.CacheCreationInputTokens), c.CacheCreationInputTokens},
		{countOf(p.CacheReadInputTokens), c.CacheReadInputTokens},
	}
	if (p.CacheCreation == nil) != (c.CacheCreation == nil) || (p.ServerToolUse == nil) != (c.ServerToolUse == nil) {
		t.Fatalf("%s: nested objects differ", b)
	}
	if p.CacheCreation != nil {
		pairs = append(pairs, [2]count{countOf(p.CacheCreation.Ephemeral5m), c.CacheCreation.Ephemeral5m},
			[2]count{countOf(p.CacheCreation.Ephemeral1h), c.CacheCreation.Ephemeral1h})
	}
	if p.ServerToolUse != nil {
		pairs = append(pairs, [2]count{countOf(p.ServerToolUse.WebSearchRequests), c.ServerToolUse.WebSearchRequests},
			[2]count{countOf(p.ServerToolUse.WebFetchRequests), c.ServerToolUse.WebFetchRequests})
	}
	for i, pr := range pairs {
		if pr[0] != pr[1] {
			t.Fatalf("%s: field %d: *int64 %+v, count %+v", b, i, pr[0], pr[1])
		}
	}
}

var usageSeeds = []string{
	`{"input_tokens":4000,"cache_creation_input_tokens":0,"cache_read_input_tokens":12,"output_tokens":1}`,
	`{"output_tokens":250}`,
	`{"input_tokens":null}`,
	`{"input_tokens":5,"input_tokens":null}`,
	`{"input_tokens":null,"input_tokens":7}`,
	`{"input_tokens":-3}`,
	`{"input_tokens":-0}`,
	`{"input_tokens":1.5}`,
	`{"input_tokens":1e3}`,
	`{"input_tokens":"5"}`,
	`{"input_tokens":true}`,
	`{"input_tokens":{}}`,
	`{"input_tokens":[1]}`,
	`{"input_tokens":9223372036854775807}`,
	`{"input_tokens":9223372036854775808}`,
	`{"input_tokens":-9223372036854775809}`,
	`{"INPUT_TOKENS":3}`,
	`{"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":null}}`,
	`{"cache_creation":null,"server_tool_use":{"web_search_requests":2}}`,
	`{"server_tool_use":{"web_fetch_requests":2.0}}`,
	`null`,
	`[]`,
	`{"input_tokens":3`,
}

func TestCountDecodesAsPointer(t *testing.T) {
	for _, s := range usageSeeds {
		sameUsage(t, []byte(s))
	}
}

// FuzzCountDecodesAsPointer checks that a usage object decodes with count
// fields exactly as it did with *int64 fields.
func FuzzCountDecodesAsPointer(f *testing.F) {
	for _, s := range usageSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameUsage(t, b) })
}

// TestTypeFieldDecodesAsString checks that an event's "type" decodes as
// typeField to the kind of the string encoding/json would have decoded,
// and fails where that fails.
func TestTypeFieldDecodesAsString(t *testing.T) {
	for _, s := range []string{
		`{"type":"message_start"}`,
		`{"type":"message_delta"}`,
		`{"type":"content_block_delta"}`,
		`{"type":"message_stop"}`,
		`{"type":""}`,
		`{"type":null}`,
		`{"type":"message_delta","type":null}`,
		`{"type":"message\u005fstart"}`,
		`{"type":"message_start\u0000"}`,
		`{"type":"MESSAGE_START"}`,
		`{"TYPE":"message_start"}`,
		`{"type":"message_start","type":"ping"}`,
		`{"type":5}`,
		`{"type":["message_start"]}`,
		`{"type":"\xff"}`,
		`{}`,
	} {
		var str struct {
			Type string `json:"type"`
		}
		var kind struct {
			Type typeField `json:"type"`
		}
		serr := json.Unmarshal([]byte(s), &str)
		kerr := json.Unmarshal([]byte(s), &kind)
		if (serr == nil) != (kerr == nil) {
			t.Errorf("%s: string error %v, typeField error %v", s, serr, kerr)
			continue
		}
		if want := eventKindOf([]byte(str.Type)); serr == nil && eventKind(kind.Type) != want {
			t.Errorf("%s: kind %d, want %d (%q)", s, kind.Type, want, str.Type)
		}
	}
}
