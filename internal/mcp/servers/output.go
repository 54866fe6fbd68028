package servers

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/tools"
)

// render turns a tool result into the text the model sees: text content as
// is, other content summarized on a line of its own, the structured content
// as JSON when there is nothing else.
func render(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image content: %s, %d bytes, not shown]", mimeOr(c.MIMEType), len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio content: %s, %d bytes, not shown]", mimeOr(c.MIMEType), len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link: %s %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			switch r := c.Resource; {
			case r == nil:
				parts = append(parts, "[embedded resource: empty]")
			case r.Text != "" || len(r.Blob) == 0:
				parts = append(parts, fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text))
			default:
				parts = append(parts, fmt.Sprintf("[resource %s: %s, %d bytes of binary data, not shown]", r.URI, mimeOr(r.MIMEType), len(r.Blob)))
			}
		default:
			b, _ := json.Marshal(c)
			var kind struct {
				Type string `json:"type"`
			}
			json.Unmarshal(b, &kind)
			parts = append(parts, fmt.Sprintf("[%s content, not shown]", orDefault(kind.Type, "unknown")))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	text := strings.Join(parts, "\n")
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	if text == "" {
		return "(no output)"
	}
	return text
}

func mimeOr(m string) string { return orDefault(m, "unknown type") }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// capOutput caps text at limit bytes the way the built-in tools do: the
// middle is replaced by "[output truncated: N bytes total]", and when the
// call has a StateDir and an id the whole text is kept there as
// tools.SpillDir/<id>.txt, which a last line says.
func capOutput(call tools.Call, text string, limit int) string {
	if len(text) <= limit {
		return text
	}
	note := fmt.Sprintf("\n\n[output truncated: %d bytes total]\n\n", len(text))
	room := max(0, limit-len(note))
	head, tail := room/2, room-room/2
	out := strings.ToValidUTF8(text[:head], "") + note + strings.ToValidUTF8(text[len(text)-tail:], "")
	if kept := spill(call, text); kept != "" {
		if !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		out += kept
	}
	return out
}

// spill keeps text as StateDir/tools.SpillDir/<id>.txt (0600, written to a
// temporary file, synced and renamed) and returns the note that says so,
// or "" when the call keeps nothing.
func spill(call tools.Call, text string) string {
	name := spillName(call.ID)
	if call.StateDir == "" || name == "" {
		return ""
	}
	kept := text
	if len(kept) > tools.MaxSpillBytes {
		kept = kept[:tools.MaxSpillBytes]
	}
	dir := filepath.Join(call.StateDir, tools.SpillDir)
	if err := writeFileAtomic(dir, name, kept); err != nil {
		return fmt.Sprintf("[the full output (%d bytes) could not be kept on the session volume]", len(text))
	}
	rel := tools.SpillDir + "/" + name
	if len(kept) < len(text) {
		return fmt.Sprintf("[full output (%d bytes) too large to keep whole: its first %d bytes are kept on the session volume as %s]", len(text), len(kept), rel)
	}
	return fmt.Sprintf("[full output (%d bytes) kept on the session volume as %s]", len(text), rel)
}

func writeFileAtomic(dir, name, text string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// spillName maps a tool_use id to a file name as the built-in tools do.
func spillName(id string) string {
	if id == "" || len(id) > 200 {
		return ""
	}
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b) + ".txt"
}
