package anthropicsim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/talkide/platform/internal/contract"
)

// Marker starts every text the simulator writes, so that nobody mistakes a
// simulated reply for a model's.
const Marker = "[simulator] "

// quoteLimit is how many characters of each tool result a reply quotes.
const quoteLimit = 200

// reply is a decided answer to one Messages request.
type reply struct {
	Content    []contentBlock
	StopReason string // "end_turn", "tool_use" or "max_tokens"
	Usage      usage
	// Sleep is the pause a [[sleep:MS]] directive asked for; HasSleep tells
	// it apart from [[sleep:0]].
	Sleep    time.Duration
	HasSleep bool
}

// contentBlock is a text or tool_use block of the reply.
type contentBlock struct {
	Type  string // "text" or "tool_use"
	Text  string
	ID    string
	Name  string
	Input []byte // compacted JSON object
}

// usage is the usage object of a Message and of message_delta.
type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// decide computes the reply to req, whose raw body is body. It returns an
// *apiError when an [[error:STATUS]] directive asks for one. The only state
// it touches is the cache-prefix set (see cacheUsage).
func (s *Simulator) decide(req *request, body []byte) (*reply, error) {
	last := lastUserMessage(req.Messages)
	text := joinText(last)
	if strings.HasPrefix(req.system, contract.TitlePrompt) {
		// A title request: the message is the user's, quoted, so its
		// directives are not the caller's; the title is its first words.
		rep := &reply{StopReason: "end_turn", Content: []contentBlock{textBlock(Marker + titleOf(text))}}
		if truncate(rep, req.MaxTokens) {
			rep.StopReason = "max_tokens"
		}
		rep.Usage = s.inputUsage(req, len(body))
		rep.Usage.OutputTokens = outputTokens(rep.Content)
		return rep, nil
	}
	d := parseDirectives(text)
	if d.Malformed == "" && d.Error != 0 {
		return nil, newAPIError(d.Error, "%ssimulated %d %s requested by an [[error:%d]] directive", Marker, d.Error, errorType(d.Error), d.Error)
	}
	rep := &reply{Sleep: d.Sleep, HasSleep: d.HasSleep, StopReason: "end_turn"}
	switch {
	case d.Malformed != "":
		rep.Content = []contentBlock{textBlock(Marker + d.Malformed)}
	case len(d.Tools) > 0:
		rep.Content, rep.StopReason = toolReply(req, d)
	case hasToolResults(last):
		rep.Content = []contentBlock{textBlock(resultsText(last))}
	default:
		rep.Content = []contentBlock{textBlock(fmt.Sprintf("%smessages=%d you said: %s", Marker, len(req.Messages), text))}
	}
	if seen := imagesSeen(last); seen != "" && rep.Content[0].Type == "text" {
		rep.Content[0].Text = Marker + seen + "\n" + rep.Content[0].Text
	}
	if truncate(rep, req.MaxTokens) {
		rep.StopReason = "max_tokens"
	}
	rep.Usage = s.inputUsage(req, len(body))
	rep.Usage.OutputTokens = outputTokens(rep.Content)
	return rep, nil
}

// titleWords is how many words of the message a simulated title has.
const titleWords = 6

// titleOf is the simulated title of a message: its first titleWords words,
// without directives' brackets.
func titleOf(text string) string {
	words := strings.FieldsFunc(text, func(r rune) bool { return unicode.IsSpace(r) || r == '[' || r == ']' })
	if len(words) > titleWords {
		words = words[:titleWords]
	}
	if len(words) == 0 {
		return "untitled"
	}
	return strings.Join(words, " ")
}

// lastUserMessage returns the last message with role "user", or nil.
// Entries with role "system" are not user messages.
func lastUserMessage(msgs []message) *message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return &msgs[i]
		}
	}
	return nil
}

// joinText joins the text blocks of m with newlines.
func joinText(m *message) string {
	if m == nil {
		return ""
	}
	var texts []string
	for _, b := range m.Blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

func hasToolResults(m *message) bool {
	if m == nil {
		return false
	}
	for _, b := range m.Blocks {
		if b.Type == "tool_result" {
			return true
		}
	}
	return false
}

func textBlock(text string) contentBlock { return contentBlock{Type: "text", Text: text} }

// toolReply answers tool directives: tool_use blocks when the request offers
// every named tool, otherwise a text saying which are not offered.
func toolReply(req *request, d directives) ([]contentBlock, string) {
	offered := make(map[string]bool, len(req.Tools))
	for _, name := range req.Tools {
		offered[name] = true
	}
	var missing []string
	for _, tc := range d.Tools {
		if !offered[tc.Name] && !slices.Contains(missing, tc.Name) {
			missing = append(missing, tc.Name)
		}
	}
	if len(missing) > 0 {
		list := "none"
		if len(req.Tools) > 0 {
			list = strings.Join(req.Tools, ", ")
		}
		return []contentBlock{textBlock(fmt.Sprintf("%scannot call tool %s: not offered in this request's tools (offered: %s)",
			Marker, strings.Join(missing, ", "), list))}, "end_turn"
	}
	var out []contentBlock
	if d.Lead != "" {
		out = append(out, textBlock(Marker+d.Lead))
	}
	for i, tc := range d.Tools {
		out = append(out, contentBlock{Type: "tool_use", ID: toolUseID(len(req.Messages), i, tc), Name: tc.Name, Input: tc.Input})
	}
	return out, "tool_use"
}

// toolUseID is "toolu_sim_" and a hash of the conversation length, the
// block's position and the call, so the same request always gets the same
// ids while later turns of one conversation get new ones.
func toolUseID(nMessages, index int, tc toolCall) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%d\x00%s\x00", nMessages, index, tc.Name)
	h.Write(tc.Input)
	return "toolu_sim_" + hex.EncodeToString(h.Sum(nil)[:12])
}

// resultsText quotes the first quoteLimit characters of each tool result in
// m, marking errors.
func resultsText(m *message) string {
	var b strings.Builder
	b.WriteString(Marker + "tool results:")
	n := 0
	for _, bl := range m.Blocks {
		if bl.Type != "tool_result" {
			continue
		}
		n++
		sep := " "
		if n > 1 {
			sep = "\n"
		}
		fmt.Fprintf(&b, "%s%d) ", sep, n)
		if bl.IsError {
			b.WriteString("(error) ")
		}
		b.WriteString(quote(bl.Text, quoteLimit))
	}
	return b.String()
}

// quote returns the first n characters (runes) of s, with "…" when cut.
func quote(s string, n int) string {
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos] + "…"
		}
		i++
	}
	return s
}

// truncate cuts the reply's text to maxTokens*4 bytes (never below the
// marker, at a rune boundary) and drops tool_use blocks once the budget is
// spent. It reports whether anything was cut. maxTokens 0 means no limit.
func truncate(rep *reply, maxTokens int64) bool {
	if maxTokens <= 0 || maxTokens > 1<<40 {
		return false
	}
	budget := max(int(maxTokens*4), len(Marker))
	for i := range rep.Content {
		b := &rep.Content[i]
		if b.Type != "text" {
			continue
		}
		if len(b.Text) <= budget {
			budget -= len(b.Text)
			continue
		}
		cut := budget
		for cut > 0 && !utf8.RuneStart(b.Text[cut]) {
			cut--
		}
		b.Text = b.Text[:cut]
		rep.Content = rep.Content[:i+1]
		return true
	}
	return false
}

// outputTokens is ceil(content bytes / 4), at least 1, where content bytes
// are the text of text blocks and the name plus input JSON of tool_use
// blocks.
func outputTokens(content []contentBlock) int64 {
	n := 0
	for _, b := range content {
		n += len(b.Text) + len(b.Name) + len(b.Input)
	}
	return max(ceilDiv(n, 4), 1)
}

// inputUsage splits ceil(len(body)/4) input tokens by the cache rule: when
// the request carries cache_control anywhere, the system+tools prefix,
// ceil((len(tools)+len(system))/4) tokens of compacted JSON, is reported as
// cache_read_input_tokens if this simulator saw the same model, tools and
// system in an earlier cache_control request, else as
// cache_creation_input_tokens, and input_tokens keeps the rest (at least 1).
func (s *Simulator) inputUsage(req *request, bodyLen int) usage {
	u := usage{InputTokens: max(ceilDiv(bodyLen, 4), 1)}
	if !req.cacheControl {
		return u
	}
	prefix := min(ceilDiv(len(req.toolsJSON)+len(req.systemJSON), 4), u.InputTokens-1)
	if prefix <= 0 {
		return u
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", req.Model)
	h.Write(req.toolsJSON)
	h.Write([]byte{0})
	h.Write(req.systemJSON)
	var key [sha256.Size]byte
	h.Sum(key[:0])

	s.mu.Lock()
	_, seen := s.prefixes[key]
	if !seen {
		if len(s.prefixes) >= maxPrefixes {
			clear(s.prefixes)
		}
		s.prefixes[key] = struct{}{}
	}
	s.mu.Unlock()

	if seen {
		u.CacheReadInputTokens = prefix
	} else {
		u.CacheCreationInputTokens = prefix
	}
	u.InputTokens -= prefix
	return u
}

// countTokens is the count_tokens answer: ceil(len(body)/4), at least 1.
func countTokens(bodyLen int) int64 { return max(ceilDiv(bodyLen, 4), 1) }

func ceilDiv(n, d int) int64 { return int64((n + d - 1) / d) }

// imagesSeen describes the image blocks of m, "saw 2 images (image/png,
// 68 bytes; image/jpeg, 1021 bytes)", or is empty when it has none: what
// shows that an image reached the model.
func imagesSeen(m *message) string {
	if m == nil {
		return ""
	}
	var seen []string
	for _, b := range m.Blocks {
		if b.Type == "image" {
			seen = append(seen, fmt.Sprintf("%s, %d bytes", b.MediaType, b.Bytes))
		}
	}
	switch len(seen) {
	case 0:
		return ""
	case 1:
		return "saw 1 image (" + seen[0] + ")"
	}
	return fmt.Sprintf("saw %d images (%s)", len(seen), strings.Join(seen, "; "))
}
