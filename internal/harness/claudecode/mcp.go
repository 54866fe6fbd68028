package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/talkide/platform/internal/harness"
)

// MCPServer is one of the worker's own MCP servers that a conversation's CLI
// reaches over streamable HTTP (the worker's MCP endpoint on the
// LocalGatewayProxy).
type MCPServer struct {
	// Name is the server's name in the CLI's configuration: its tools are
	// mcp__<Name>__<tool>.
	Name string
	// URL is the server's URL for a conversation.
	URL func(conversationID string) string
	// Timeout, when positive, is the CLI's wall-clock limit on one call of
	// the server's tools (its per-server "timeout"), so that the CLI does
	// not give up on a call the server still bounds itself, a long build.
	Timeout time.Duration
}

// mcpTokenEnv carries the conversation's capability to the CLI for its MCP
// requests. The --mcp-config on the command line names it as
// ${TALKIDE_MCP_TOKEN}, which the CLI expands, so the command line (visible
// to every process of the sandbox in /proc/<pid>/cmdline) holds no
// credential. ANTHROPIC_AUTH_TOKEN cannot serve: the CLI removes it from its
// own environment before it expands MCP headers.
const mcpTokenEnv = "TALKIDE_MCP_TOKEN"

// mcpConfig is the CLI's --mcp-config for conversation conv.
func (h *Harness) mcpConfig(conv string) string {
	type server struct {
		Type    string            `json:"type"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
		Timeout int64             `json:"timeout,omitempty"` // milliseconds
	}
	servers := make(map[string]server, len(h.opts.MCPServers))
	for _, s := range h.opts.MCPServers {
		servers[s.Name] = server{Type: "http", URL: s.URL(conv), Headers: map[string]string{"Authorization": "Bearer ${" + mcpTokenEnv + "}"},
			Timeout: s.Timeout.Milliseconds()}
	}
	b, _ := json.Marshal(map[string]any{"mcpServers": servers})
	return string(b)
}

// ErrNoCall is the cause of a ResolveCall that found no tool call to tie the
// request to.
var ErrNoCall = errors.New("no such tool call")

// DefaultCallWait bounds how long ResolveCall waits for the CLI's output to
// show the tool call: the CLI prints the model's message before it runs the
// tools, but the harness reads that output on its own goroutine.
const DefaultCallWait = 10 * time.Second

// activeTurn is a turn running in the harness, as the MCP endpoint sees it.
type activeTurn struct {
	turn *harness.Turn
	ctx  context.Context // ends when the turn does

	// guarded by Harness.mu
	started map[string]string // tool_use id → tool name, as tool.started was emitted
	claimed map[string]bool   // ids given to calls that named none
	order   []string          // ids in the order they started
	changed chan struct{}     // closed and replaced when started grows
}

// beginTurn registers t as its conversation's running turn; the returned
// function ends the registration (and the turn's context).
func (h *Harness) beginTurn(ctx context.Context, t *harness.Turn) (*activeTurn, func()) {
	tctx, cancel := context.WithCancel(ctx)
	at := &activeTurn{turn: t, ctx: tctx, started: make(map[string]string), claimed: make(map[string]bool), changed: make(chan struct{})}
	h.mu.Lock()
	h.turns[t.ConversationID] = at
	h.mu.Unlock()
	return at, func() {
		cancel()
		h.mu.Lock()
		if h.turns[t.ConversationID] == at {
			delete(h.turns, t.ConversationID)
		}
		h.mu.Unlock()
	}
}

// toolStarted records a tool call the mapper started in at.
func (h *Harness) toolStarted(at *activeTurn, id, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, dup := at.started[id]; dup {
		return
	}
	at.started[id] = name
	at.order = append(at.order, id)
	close(at.changed)
	at.changed = make(chan struct{})
}

// ResolveCall ties an MCP tools/call that arrived for conversation conv to
// the worker's own record of the turn: it returns the conversation's running
// turn, the id of the model's tool_use of tool (mcp__<server>__<name>) that
// the call serves, and a context that ends with the turn. toolUseID is what
// the CLI said the call is for (its _meta); it is believed only when the
// turn has a tool_use of that id and that tool. Without it, the oldest
// tool_use of that tool not yet given to a call is taken. ResolveCall waits
// up to Options.CallWait for the CLI's output to show the tool_use, and
// fails with ErrNoCall when no turn runs or no such tool_use comes.
func (h *Harness) ResolveCall(ctx context.Context, conv, tool, toolUseID string) (*harness.Turn, string, context.Context, error) {
	timer := time.NewTimer(h.opts.CallWait)
	defer timer.Stop()
	for {
		h.mu.Lock()
		at := h.turns[conv]
		if at == nil {
			h.mu.Unlock()
			return nil, "", nil, fmt.Errorf("%w: no turn of this conversation is running", ErrNoCall)
		}
		id := ""
		if toolUseID != "" {
			if at.started[toolUseID] == tool {
				// Taken, so that a call naming no id is not given it too
				// (and read as a replay of this one); a call naming it
				// again is a retry of this one and gets it.
				id = toolUseID
				at.claimed[id] = true
			}
		} else {
			for _, cand := range at.order {
				if at.started[cand] == tool && !at.claimed[cand] {
					id = cand
					at.claimed[cand] = true
					break
				}
			}
		}
		changed := at.changed
		h.mu.Unlock()
		if id != "" {
			return at.turn, id, at.ctx, nil
		}
		select {
		case <-changed:
		case <-at.ctx.Done():
			return nil, "", nil, fmt.Errorf("%w: the turn ended", ErrNoCall)
		case <-ctx.Done():
			return nil, "", nil, ctx.Err()
		case <-timer.C:
			if toolUseID != "" {
				return nil, "", nil, fmt.Errorf("%w: the running turn has no call %s of %s", ErrNoCall, toolUseID, tool)
			}
			return nil, "", nil, fmt.Errorf("%w: the running turn has no call of %s", ErrNoCall, tool)
		}
	}
}
