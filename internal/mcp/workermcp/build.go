package workermcp

import (
	"context"
	"errors"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/tools"
)

// BuildToolName is Build's name as the CLI offers it.
const BuildToolName = "mcp__" + BuildServer + "__Build"

// MaxStreamedOutput bounds the live output of one build in the
// conversation's event stream, as the native harness bounds it.
const MaxStreamedOutput = 1 << 20

// newBuildServer is the talkide-build server: the native toolset's Build,
// with its description and input schema, over the same runner. The model
// gets the result when the build ends (the CLI shows a tool's result only
// then); the live output goes to the conversation's event stream as
// tool.output events of the tool_use, as for the native harness, and not to
// the CLI, which would only hold it.
func newBuildServer(runner build.Runner, maxOutput int, log *slog.Logger) *mcp.Server {
	b := &tools.Build{Runner: runner, MaxOutputBytes: maxOutput}
	s := mcp.NewServer(&mcp.Implementation{Name: BuildServer, Title: "TalkIDE builds", Version: "1.0.0"}, nil)
	s.AddTool(&mcp.Tool{
		Name:        b.Name(),
		Description: b.Description(),
		InputSchema: b.InputSchema(),
		Annotations: &mcp.ToolAnnotations{Title: "Build and test", DestructiveHint: new(false), OpenWorldHint: new(true)},
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, ok := callFrom(ctx)
		if !ok {
			return nil, errors.New("workermcp: Build called without a resolved call")
		}
		t := c.turn
		ws, err := tools.NewWorkspace(t.Workspace)
		if err != nil {
			log.Warn("Build: the workspace could not be opened", "conversation", t.ConversationID, "err", err)
			return errorResult("Build cannot run: the conversation's workspace could not be opened"), nil
		}
		input := req.Params.Arguments
		if len(input) == 0 {
			input = []byte("{}")
		}
		res, err := b.Run(ctx, tools.Call{
			ID:           c.toolUseID,
			Input:        input,
			Workspace:    ws,
			StateDir:     tools.StateDirOf(t.SessionDir),
			Jail:         t.Jail,
			Conversation: t.ConversationID,
			Output: tools.StreamCap(MaxStreamedOutput, func(chunk string) {
				t.Emit(contract.Event{Kind: contract.KindToolOutput, Tool: &contract.ToolEvent{ID: c.toolUseID, Name: BuildToolName, Output: chunk}})
			}),
		})
		if err != nil {
			// Only an interrupt is an error of Run; the CLI is being
			// stopped or has gone, so this answer is for the record.
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Output}}, IsError: res.IsError}, nil
	})
	return s
}
