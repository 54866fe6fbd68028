package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readAll(t *testing.T, in string) []Event {
	t.Helper()
	r := NewReader(strings.NewReader(in), 1024)
	var got []Event
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		got = append(got, ev)
	}
}

func TestReader(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []Event
	}{
		"simple":                 {"id: 1\nevent: a\ndata: x\n\n", []Event{{ID: "1", Event: "a", Data: []byte("x")}}},
		"multiline data":         {"data: a\ndata: b\n\n", []Event{{Data: []byte("a\nb")}}},
		"crlf":                   {"id: 7\r\ndata: x\r\n\r\n", []Event{{ID: "7", Data: []byte("x")}}},
		"comments skipped":       {": ping\n\n: hb\ndata: y\n\n", []Event{{Data: []byte("y")}}},
		"no space after colon":   {"data:z\n\n", []Event{{Data: []byte("z")}}},
		"unterminated dropped":   {"data: a\n\ndata: b\n", []Event{{Data: []byte("a")}}},
		"no data not dispatched": {"event: x\n\ndata: q\n\n", []Event{{Data: []byte("q")}}},
		"anthropic style": {"event: message_start\ndata: {\"type\":\"message_start\"}\n\n",
			[]Event{{Event: "message_start", Data: []byte(`{"type":"message_start"}`)}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, readAll(t, tc.in)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLineTooLong(t *testing.T) {
	r := NewReader(strings.NewReader("data: "+strings.Repeat("x", 5000)+"\n\n"), 1024)
	if _, err := r.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err = %v, want ErrLineTooLong", err)
	}
}

func TestWriteRoundTrip(t *testing.T) {
	var b bytes.Buffer
	in := []Event{
		{ID: "1", Event: "text.delta", Data: []byte(`{"a":1}`)},
		{ID: "2", Data: []byte("line1\nline2\r\nline3")},
	}
	for _, ev := range in {
		if err := Write(&b, ev.ID, ev.Event, ev.Data); err != nil {
			t.Fatal(err)
		}
		if err := WriteComment(&b, "heart\nbeat"); err != nil {
			t.Fatal(err)
		}
	}
	got := readAll(t, b.String())
	in[1].Data = []byte("line1\nline2\nline3")
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if err := Write(&b, "1\n2", "", nil); err == nil {
		t.Error("Write accepted an id with a line break")
	}
}

func FuzzReader(f *testing.F) {
	f.Add("id: 1\nevent: a\ndata: x\n\n")
	f.Add("data: a\r\ndata: b\r\n\r\n: c\n")
	f.Add(":\n\n\n\ndata\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		r := NewReader(strings.NewReader(in), 256)
		for i := 0; i < 10000; i++ {
			ev, err := r.Next()
			if err != nil {
				return
			}
			// Whatever we parsed must survive a write and a re-read.
			if strings.ContainsAny(ev.ID, "\r\n") || strings.ContainsAny(ev.Event, "\r\n") {
				t.Fatalf("parsed field with a line break: %q %q", ev.ID, ev.Event)
			}
			var b bytes.Buffer
			if err := Write(&b, ev.ID, ev.Event, ev.Data); err != nil {
				t.Fatal(err)
			}
			again, err := NewReader(&b, 1<<20).Next()
			if err != nil {
				t.Fatalf("re-read: %v", err)
			}
			// Write turns every line break in data into "\n".
			norm := bytes.ReplaceAll(bytes.ReplaceAll(ev.Data, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n"))
			if again.ID != ev.ID || again.Event != ev.Event || !bytes.Equal(again.Data, norm) {
				t.Fatalf("round trip changed the event: %+v vs %+v", ev, again)
			}
		}
	})
}

func TestEventTooLarge(t *testing.T) {
	in := strings.Repeat("data: "+strings.Repeat("x", 100)+"\n", 50) + "\n"
	if _, err := NewReader(strings.NewReader(in), 1024).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
	if _, err := NewReader(strings.NewReader(in), 4096).Next(); err != nil {
		t.Fatalf("an event within the limit: %v", err)
	}
}
