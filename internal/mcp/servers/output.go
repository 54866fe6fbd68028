package servers

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Render turns an MCP tool result into the text the model sees: text
// content as is, other content summarized on a line of its own, the
// structured content as JSON when there is nothing else.
func Render(res *mcp.CallToolResult) string {
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
	switch {
	case text != "":
		return text
	case res.IsError:
		return "the tool failed without saying why"
	}
	return "(no output)"
}

func mimeOr(m string) string { return orDefault(m, "unknown type") }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
