package servers

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestRender(t *testing.T) {
	tests := map[string]struct {
		res  *mcp.CallToolResult
		want string
	}{
		"text": {&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}}, "a\nb"},
		"image": {&mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{MIMEType: "image/png", Data: []byte("xyz")}}},
			"[image content: image/png, 3 bytes, not shown]"},
		"structured only":       {&mcp.CallToolResult{StructuredContent: map[string]any{"n": 1}}, `{"n":1}`},
		"nothing":               {&mcp.CallToolResult{}, "(no output)"},
		"an error with nothing": {&mcp.CallToolResult{IsError: true}, "the tool failed without saying why"},
		"invalid UTF-8":         {&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a\xffb"}}}, "a\uFFFDb"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Render(tc.res); got != tc.want {
				t.Errorf("Render = %q, want %q", got, tc.want)
			}
		})
	}
}
