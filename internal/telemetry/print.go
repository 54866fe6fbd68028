package telemetry

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/observe"
)

// TraceFileName is the trace file's name in talkide dev's data directory.
const TraceFileName = "traces.jsonl"

// maxLine bounds one line of a trace file: a span has a few dozen short
// attributes.
const maxLine = 1 << 20

// ErrNoTurn says the trace file holds no span of the turn.
var ErrNoTurn = errors.New("no span of this turn in the trace file")

// ReadTurn returns the spans of every trace that has a span of turnID,
// read from the trace file at path.
func ReadTurn(path, turnID string) ([]FileSpan, error) {
	if err := contract.ValidateID("turn id", turnID); err != nil {
		return nil, err
	}
	traces := map[string]bool{}
	if err := scanFile(path, func(s *FileSpan) {
		if s.Attributes[string(observe.Turn)] == turnID {
			traces[s.TraceID] = true
		}
	}); err != nil {
		return nil, err
	}
	if len(traces) == 0 {
		return nil, fmt.Errorf("turn %s: %w", turnID, ErrNoTurn)
	}
	var out []FileSpan
	err := scanFile(path, func(s *FileSpan) {
		if traces[s.TraceID] {
			out = append(out, *s)
		}
	})
	return out, err
}

func scanFile(path string, fn func(*FileSpan)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		var s FileSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			// A line cut short by a crash is skipped, not fatal: the rest
			// of the file is still good.
			continue
		}
		fn(&s)
	}
	return sc.Err()
}

// PrintTurn prints the span tree of each trace of turnID in the file at
// path: when each span started after the trace's first, how long it
// took, its name and what it measured.
func PrintTurn(w io.Writer, path, turnID string) error {
	spans, err := ReadTurn(path, turnID)
	if err != nil {
		return err
	}
	byTrace := map[string][]FileSpan{}
	var order []string
	for _, s := range spans {
		if _, ok := byTrace[s.TraceID]; !ok {
			order = append(order, s.TraceID)
		}
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}
	for _, id := range order {
		printTrace(w, id, byTrace[id])
	}
	return nil
}

func printTrace(w io.Writer, id string, spans []FileSpan) {
	ids := map[string]bool{}
	start, end := spans[0].Start, spans[0].End
	for _, s := range spans {
		ids[s.SpanID] = true
		if s.Start.Before(start) {
			start = s.Start
		}
		if s.End.After(end) {
			end = s.End
		}
	}
	children := map[string][]FileSpan{}
	for _, s := range spans {
		p := s.ParentID
		if !ids[p] {
			p = "" // a root, or a child whose parent is not in the file
		}
		children[p] = append(children[p], s)
	}
	for _, c := range children {
		slices.SortFunc(c, func(a, b FileSpan) int { return a.Start.Compare(b.Start) })
	}
	fmt.Fprintf(w, "trace %s: %d spans, %s\n", id, len(spans), round(end.Sub(start)))
	fmt.Fprintf(w, "%10s %10s  %s\n", "START", "DURATION", "SPAN")
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		for _, s := range children[parent] {
			fmt.Fprintf(w, "%10s %10s  %s%s%s\n", "+"+round(s.Start.Sub(start)).String(), round(s.End.Sub(s.Start)),
				strings.Repeat("  ", depth), s.Name, details(s))
			walk(s.SpanID, depth+1)
		}
	}
	walk("", 0)
}

// detailKeys are the attributes shown beside a span's name.
var detailKeys = []string{
	string(observe.Tool), string(observe.ToolOutcome), string(observe.GenAIResponseModel),
	string(observe.GenAIInputTokens), string(observe.GenAIOutputTokens), string(observe.GenAICacheRead),
	string(observe.GenAICacheCreation), string(observe.GenAIFinishReasons), "talkide.budget.decision", "http.response.status_code",
	string(observe.ErrorType),
}

func details(s FileSpan) string {
	var parts []string
	for _, k := range detailKeys {
		if v, ok := s.Attributes[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", strings.TrimPrefix(strings.TrimPrefix(k, "gen_ai."), "talkide."), v))
		}
	}
	if s.Error != "" {
		parts = append(parts, "ERROR")
	}
	out := ""
	if s.Service != "" {
		out = " [" + s.Service + "]"
	}
	if len(parts) > 0 {
		out += " " + strings.Join(parts, " ")
	}
	return out
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
