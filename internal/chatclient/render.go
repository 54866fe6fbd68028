package chatclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/talkide/platform/internal/contract"
)

// Limits of what the renderer prints of one tool call.
const (
	maxResultLines = 10  // lines of a tool result
	maxLineRunes   = 200 // runes of one printed result line
	maxSummary     = 100 // runes of a tool call's one-line input summary
)

// ANSI styles, used only when Renderer.Color is set.
const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiDim    = "\x1b[2m"
	ansiRed    = "\x1b[31m"
	ansiYellow = "\x1b[33m"
)

// Renderer prints a conversation's events readably to a terminal. Text from
// the model, tools and server is stripped of control characters (other than
// newline and tab) so it cannot drive the terminal. Render may be called
// from several goroutines; a Renderer must not be copied after first use.
type Renderer struct {
	W        io.Writer // nil discards the output
	Verbose  bool      // also print usage, tool output chunks and session events
	Color    bool      // style with ANSI escapes
	ShowUser bool      // print user.message events, for replaying history

	mu sync.Mutex // guards the fields below and writes to W
	// midLine is true when the last byte written was not a newline.
	midLine bool
	// deltas is true when text deltas of the current assistant message have
	// been printed; deltaIndex is the content block they belonged to.
	deltas     bool
	deltaIndex int
	// headers holds the "⏺ Tool(input)" line of each started, unfinished
	// tool call by id; lastTool is the id of the call whose header was the
	// last thing printed, "" if something else came after.
	headers  map[string]string
	lastTool string
}

// Render prints one event.
func (r *Renderer) Render(ev contract.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b bytes.Buffer
	r.render(&b, ev)
	if b.Len() == 0 || r.W == nil {
		return
	}
	r.midLine = b.Bytes()[b.Len()-1] != '\n'
	_, _ = r.W.Write(b.Bytes()) // a terminal write error has nowhere to go
}

func (r *Renderer) render(b *bytes.Buffer, ev contract.Event) {
	if ev.ParentToolUseID != "" {
		// A sub-agent's own event: its Task call's output already shows
		// that work as text, indented under the call.
		return
	}
	switch ev.Kind {
	case contract.KindUserMessage:
		if r.ShowUser {
			r.lineStart(b)
			r.block(b, r.style(ansiBold, "> "), "  ", sanitize(ev.Text))
		}
	case contract.KindTextDelta:
		text := sanitize(ev.Text)
		if text == "" {
			return
		}
		if r.deltas && ev.Index != r.deltaIndex {
			r.lineStart(b)
		}
		b.WriteString(text)
		r.deltas, r.deltaIndex, r.lastTool = true, ev.Index, ""
	case contract.KindMessage:
		if !r.deltas {
			if text := strings.TrimRight(sanitize(ev.Text), "\n"); text != "" {
				r.lineStart(b)
				b.WriteString(text)
			}
		}
		r.lineStart(b)
		r.deltas, r.deltaIndex, r.lastTool = false, 0, ""
	case contract.KindToolStarted:
		if ev.Tool == nil {
			return
		}
		r.lineStart(b)
		h := r.toolHeader(ev.Tool)
		b.WriteString(h + "\n")
		if r.headers == nil {
			r.headers = make(map[string]string)
		}
		r.headers[ev.Tool.ID] = h
		r.lastTool = ev.Tool.ID
	case contract.KindToolOutput:
		if r.Verbose && ev.Tool != nil {
			b.WriteString(sanitize(ev.Tool.Output))
			if ev.Tool.ID != r.lastTool {
				r.lastTool = ""
			}
		}
	case contract.KindToolFinished:
		if ev.Tool != nil {
			r.lineStart(b)
			r.toolResult(b, ev.Tool)
		}
	case contract.KindUsage:
		if r.Verbose && ev.Usage != nil {
			r.lineStart(b)
			u := ev.Usage
			s := fmt.Sprintf("· usage %s: %d in, %d out", sanitize(u.Model), u.InputTokens, u.OutputTokens)
			if u.CacheReadInputTokens > 0 || u.CacheCreationInputTokens > 0 {
				s += fmt.Sprintf(", %d cache read, %d cache write", u.CacheReadInputTokens, u.CacheCreationInputTokens)
			}
			b.WriteString(r.style(ansiDim, s) + "\n")
			r.lastTool = ""
		}
	case contract.KindTurnStarted:
		if r.Verbose {
			r.lineStart(b)
			b.WriteString(r.style(ansiDim, "· turn "+sanitize(ev.TurnID)+" started") + "\n")
			r.lastTool = ""
		}
	case contract.KindTurnFinished:
		r.lineStart(b)
		if r.Verbose && ev.Finish != nil {
			f := ev.Finish
			s := fmt.Sprintf("· turn finished: %s, %d model calls, %s", sanitize(f.StopReason), f.ModelCalls, duration(f.DurationMS))
			b.WriteString(r.style(ansiDim, s) + "\n")
		}
		b.WriteString("\n")
		r.endTurn()
	case contract.KindTurnFailed:
		r.lineStart(b)
		s := "✗ turn failed"
		if f := ev.Failure; f != nil {
			if f.Code != "" {
				s += " (" + sanitize(f.Code) + ")"
			}
			if msg := oneLine(sanitize(f.Message)); msg != "" {
				s += ": " + msg
			}
		}
		b.WriteString(r.style(ansiRed, s) + "\n\n")
		r.endTurn()
	case contract.KindNotice:
		r.lineStart(b)
		r.block(b, r.style(ansiYellow, "! "), "  ", sanitize(ev.Text))
		r.lastTool = ""
	case contract.KindSessionCreated, contract.KindSessionResumed:
		if r.Verbose {
			r.lineStart(b)
			s := "· session created"
			if ev.Kind == contract.KindSessionResumed {
				s = "· session resumed"
			}
			if se := ev.Session; se != nil {
				s += " (harness " + sanitize(se.Harness)
				if se.Messages > 0 {
					s += fmt.Sprintf(", %d messages restored", se.Messages)
				}
				s += ")"
			}
			b.WriteString(r.style(ansiDim, s) + "\n")
			r.lastTool = ""
		}
	default:
		if r.Verbose {
			r.lineStart(b)
			b.WriteString(r.style(ansiDim, "· "+sanitize(ev.Kind)+" event") + "\n")
			r.lastTool = ""
		}
	}
}

// lineStart ends the current line if output so far, in b or before it,
// stopped in the middle of one.
func (r *Renderer) lineStart(b *bytes.Buffer) {
	if b.Len() > 0 {
		if b.Bytes()[b.Len()-1] != '\n' {
			b.WriteByte('\n')
		}
	} else if r.midLine {
		b.WriteByte('\n')
	}
}

// block writes text with prefix before its first line and indent before the
// others.
func (r *Renderer) block(b *bytes.Buffer, prefix, indent, text string) {
	for i, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if i == 0 {
			b.WriteString(prefix)
		} else {
			b.WriteString(indent)
		}
		b.WriteString(line + "\n")
	}
}

func (r *Renderer) endTurn() {
	r.deltas, r.deltaIndex, r.lastTool = false, 0, ""
	clear(r.headers)
}

func (r *Renderer) style(ansi, s string) string {
	if !r.Color {
		return s
	}
	return ansi + s + ansiReset
}

// toolHeader returns the one-line "⏺ Name(summary)" of a tool call.
func (r *Renderer) toolHeader(t *contract.ToolEvent) string {
	h := r.style(ansiBold, "⏺ "+oneLine(sanitize(t.Name)))
	if s := toolSummary(t.Name, t.Input); s != "" {
		h += "(" + s + ")"
	}
	return h
}

// toolResult prints a finished call's result under its header, repeating
// the header when something else was printed since it.
func (r *Renderer) toolResult(b *bytes.Buffer, t *contract.ToolEvent) {
	if t.ID != r.lastTool || r.lastTool == "" {
		h, ok := r.headers[t.ID]
		if !ok {
			h = r.toolHeader(&contract.ToolEvent{Name: t.Name})
		}
		b.WriteString(h + "\n")
	}
	delete(r.headers, t.ID)
	r.lastTool = ""

	out := strings.TrimRight(sanitize(t.Output), "\n")
	lines := []string{"(no output)"}
	if out != "" {
		lines = strings.Split(out, "\n")
	}
	hidden := 0
	if len(lines) > maxResultLines {
		lines, hidden = lines[:maxResultLines], len(lines)-maxResultLines
	}
	for i, line := range lines {
		line = truncate(line, maxLineRunes)
		if i == 0 {
			if t.IsError {
				line = r.style(ansiRed, "✗ "+line)
			} else {
				line = r.style(ansiDim, line)
			}
			b.WriteString("  ⎿ " + line + "\n")
			continue
		}
		b.WriteString("    " + r.style(ansiDim, line) + "\n")
	}
	if hidden > 0 {
		b.WriteString("    " + r.style(ansiDim, fmt.Sprintf("… +%d lines", hidden)) + "\n")
	}
	if t.Truncated {
		b.WriteString("    " + r.style(ansiDim, "(output truncated)") + "\n")
	}
}

// toolSummary returns a compact one-line view of a tool call's input: the
// command of Bash, the path of a file tool, else the compact JSON.
func toolSummary(name string, input json.RawMessage) string {
	if len(bytes.TrimSpace(input)) == 0 {
		return ""
	}
	var fields map[string]any
	if json.Unmarshal(input, &fields) == nil {
		if cmd, ok := fields["command"].(string); ok && strings.EqualFold(name, "Bash") {
			return truncate(oneLine(sanitize(cmd)), maxSummary)
		}
		for _, k := range []string{"file_path", "notebook_path"} {
			if p, ok := fields[k].(string); ok {
				return truncate(oneLine(sanitize(p)), maxSummary)
			}
		}
		if len(fields) == 0 {
			return ""
		}
	}
	var c bytes.Buffer
	if json.Compact(&c, input) != nil {
		return ""
	}
	return truncate(sanitize(c.String()), maxSummary)
}

// oneLine returns the first line of s, with " …" when there were more.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if first, _, ok := strings.Cut(s, "\n"); ok {
		return strings.TrimSpace(first) + " …"
	}
	return s
}

// truncate cuts s to n runes, the last being "…" when it was cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n-1 {
			break
		}
		count++
	}
	return s[:i] + "…"
}

// sanitize removes control characters other than newline and tab (ESC, CR,
// backspace, C1 controls) and replaces invalid UTF-8, so untrusted text
// cannot move the cursor, recolour or retitle the terminal.
func sanitize(s string) string {
	clean := true
	for _, c := range s {
		if c == utf8.RuneError || isControl(c) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, c := range s {
		if !isControl(c) {
			b.WriteRune(c)
		}
	}
	return b.String()
}

func isControl(c rune) bool {
	return (c < 0x20 && c != '\n' && c != '\t') || (c >= 0x7f && c <= 0x9f)
}

func duration(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).Round(100 * time.Millisecond).String()
}
