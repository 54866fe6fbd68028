package contract

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestValidateParent: parent_tool_use_id is optional, one line of at most
// MaxToolIDLength characters, on the kinds a sub-agent produces, in a turn,
// and never the event's own call.
func TestValidateParent(t *testing.T) {
	ok := []Event{
		{Kind: KindUserMessage, TurnID: "t1"},
		{Kind: KindTextDelta, TurnID: "t1", ParentToolUseID: "toolu_01"},
		{Kind: KindMessage, TurnID: "t1", ParentToolUseID: "toolu_01"},
		{Kind: KindUsage, TurnID: "t1", ParentToolUseID: "toolu_01"},
		{Kind: KindToolStarted, TurnID: "t1", ParentToolUseID: "toolu_01", Tool: &ToolEvent{ID: "toolu_02"}},
		{Kind: KindToolOutput, TurnID: "t1", ParentToolUseID: "toolu_01", Tool: &ToolEvent{ID: "toolu_02"}},
		{Kind: KindToolFinished, TurnID: "t1", ParentToolUseID: strings.Repeat("x", MaxToolIDLength), Tool: &ToolEvent{ID: "toolu_02"}},
	}
	for _, ev := range ok {
		if err := ev.ValidateParent(); err != nil {
			t.Errorf("%s with parent %q: %v", ev.Kind, ev.ParentToolUseID, err)
		}
	}
	bad := map[string]Event{
		"too long":      {Kind: KindTextDelta, TurnID: "t1", ParentToolUseID: strings.Repeat("x", MaxToolIDLength+1)},
		"newline":       {Kind: KindTextDelta, TurnID: "t1", ParentToolUseID: "a\nb"},
		"bidi":          {Kind: KindTextDelta, TurnID: "t1", ParentToolUseID: "a\u202eb"},
		"spaces":        {Kind: KindTextDelta, TurnID: "t1", ParentToolUseID: " a"},
		"blank":         {Kind: KindTextDelta, TurnID: "t1", ParentToolUseID: "  "},
		"not UTF-8":     {Kind: KindTextDelta, TurnID: "t1", ParentToolUseID: "a\xffb"},
		"turn.finished": {Kind: KindTurnFinished, TurnID: "t1", ParentToolUseID: "toolu_01"},
		"user.message":  {Kind: KindUserMessage, TurnID: "t1", ParentToolUseID: "toolu_01"},
		"notice":        {Kind: KindNotice, ParentToolUseID: "toolu_01"},
		"no turn":       {Kind: KindTextDelta, ParentToolUseID: "toolu_01"},
		"own call":      {Kind: KindToolStarted, TurnID: "t1", ParentToolUseID: "toolu_01", Tool: &ToolEvent{ID: "toolu_01"}},
	}
	for name, ev := range bad {
		err := ev.ValidateParent()
		fe, isField := errors.AsType[*FieldError](err)
		if !isField || fe.Field != "parent_tool_use_id" || !errors.Is(err, ErrInvalidValue) {
			t.Errorf("%s: %v; want a FieldError about parent_tool_use_id", name, err)
		}
	}
}

// TestParentIsOptionalOnTheWire: an event without a parent encodes as
// before (no key), so a reader that knows nothing of it sees no change.
func TestParentIsOptionalOnTheWire(t *testing.T) {
	b, err := json.Marshal(Event{Seq: 1, Kind: KindTextDelta, Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "parent_tool_use_id") {
		t.Errorf("an event without a parent encodes the key: %s", b)
	}
	b, _ = json.Marshal(Event{Seq: 2, Kind: KindTextDelta, Text: "hi", ParentToolUseID: "toolu_1"})
	var back Event
	if err := json.Unmarshal(b, &back); err != nil || back.ParentToolUseID != "toolu_1" {
		t.Errorf("round trip: %s → %+v, %v", b, back, err)
	}
}
