package native

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/talkide/platform/internal/tools"
)

// projectFiles are the project's own instructions for agents, read from the
// workspace root at the start of every turn, in this order.
var projectFiles = []string{"CLAUDE.md", "AGENTS.md"}

// maxProjectFile bounds what is read of one instructions file.
const maxProjectFile = 64 << 10

// projectInstructions returns the workspace's instruction files as one text,
// each under a heading naming it; "" when there are none. A file is read
// through the workspace's confinement, so a symlink out of it is ignored.
func projectInstructions(ws *tools.Workspace) string {
	var b strings.Builder
	for _, name := range projectFiles {
		path, err := ws.Resolve(name)
		if err != nil {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(f, maxProjectFile+1))
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			continue
		}
		text := strings.TrimSpace(string(data))
		if text == "" {
			continue
		}
		if len(data) > maxProjectFile {
			text = string(data[:maxProjectFile]) + "\n[… cut at 64 KiB]"
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("# Project instructions from " + filepath.Base(path) + "\n\n" + text)
	}
	return b.String()
}

// systemBlocks is the system prompt of a turn: Mara's prompt, then the
// project's instructions when it has any, then (for a sub-agent) its brief.
// The last block carries a cache breakpoint.
func (h *Harness) systemBlocks(ws *tools.Workspace, sub bool) []anthropic.TextBlockParam {
	blocks := []anthropic.TextBlockParam{{Text: h.opts.System}}
	if p := projectInstructions(ws); p != "" {
		blocks = append(blocks, anthropic.TextBlockParam{Text: p})
	}
	if sub {
		blocks = append(blocks, anthropic.TextBlockParam{Text: subagentPrompt})
	}
	blocks[len(blocks)-1].CacheControl = anthropic.NewCacheControlEphemeralParam()
	return blocks
}
