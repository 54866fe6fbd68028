package harness

import (
	"encoding/json"
	"testing"
)

func TestMemTranscript(t *testing.T) {
	var m MemTranscript
	if recs, err := m.Records(); recs != nil || err != nil {
		t.Fatalf("empty: %q, %v", recs, err)
	}
	rec := json.RawMessage(`{"role":"user"}`)
	if err := m.Append(rec); err != nil {
		t.Fatal(err)
	}
	rec[2] = 'X' // the caller's buffer is the caller's
	if err := m.Append(json.RawMessage(`{"role":`)); err == nil {
		t.Error("a record that is not JSON was kept")
	}
	recs, _ := m.Records()
	if len(recs) != 1 || string(recs[0]) != `{"role":"user"}` {
		t.Fatalf("records %q", recs)
	}
	recs[0][2] = 'Y'
	if err := m.Compact(json.RawMessage(`{"summary":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := m.Append(json.RawMessage(`{"role":"assistant"}`)); err != nil {
		t.Fatal(err)
	}
	if recs, _ := m.Records(); len(recs) != 2 || string(recs[0]) != `{"summary":1}` || string(recs[1]) != `{"role":"assistant"}` {
		t.Errorf("after Compact: %q", recs)
	}
}
