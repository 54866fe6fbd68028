package issuetracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/mcp/servers"
	"github.com/talkide/platform/internal/tools"
)

// ToolPrefix starts the name of every tool Source offers, as Claude Code
// names MCP tools: mcp__<server>__<tool>.
const ToolPrefix = "mcp__" + ServerName + "__"

// ErrClosed is returned by Tools after Close.
var ErrClosed = errors.New("the issue tracker is shut down")

// Source offers the server's tools to the native harness in-process, as a
// native.ToolSource: an MCP client connected to the server over the SDK's
// in-memory transport, its tools wrapped as tools.Tool named
// mcp__talkide-issue-tracking__<tool>. One client session serves every
// conversation of the worker (calls run concurrently); each call carries its
// conversation, turn and tool_use id in _meta, so the server acts for the
// conversation whose turn made the call and nothing else.
//
// The session starts with the first Tools call; Close ends it. Source is
// safe for concurrent use.
type Source struct {
	server    *mcp.Server
	maxOutput int

	mu sync.Mutex
	// guarded by mu
	conn   *connection // nil before the first Tools and after Close
	closed bool
}

// connection is a client session to the server and what it listed.
type connection struct {
	client *mcp.ClientSession
	server *mcp.ServerSession
	tools  []listedTool
}

type listedTool struct {
	def    *mcp.Tool
	schema []byte // the input schema as JSON, decoded afresh for each InputSchema
}

// SourceOptions configure a Source; nil is the zero value.
type SourceOptions struct {
	// Server is what the source offers; nil means NewServer(cp) with
	// Logger.
	Server *mcp.Server
	// Logger is the default server's logger; nil means don't log.
	Logger *slog.Logger
	// MaxOutputBytes caps a tool result's text for the model, keeping its
	// head; default tools.DefaultMaxOutputBytes.
	MaxOutputBytes int
}

// NewSource returns a source of the talkide-issue-tracking tools calling the
// control-plane through cp.
func NewSource(cp *Client, opts *SourceOptions) *Source {
	o := defaults.Copy(opts)
	if o.Server == nil {
		o.Server = NewServer(cp, &ServerOptions{Logger: o.Logger})
	}
	defaults.IfNotPositive(&o.MaxOutputBytes, tools.DefaultMaxOutputBytes)
	return &Source{server: o.Server, maxOutput: o.MaxOutputBytes}
}

// Tools implements native.ToolSource: the server's tools, scoped to t's
// conversation and turn.
func (s *Source) Tools(ctx context.Context, t *harness.Turn) ([]tools.Tool, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("MCP server %s: %w", ServerName, err)
	}
	out := make([]tools.Tool, len(conn.tools))
	for i, lt := range conn.tools {
		out[i] = &mcpTool{
			session: conn.client, def: lt.def, schema: lt.schema, name: ToolPrefix + lt.def.Name,
			conversation: t.ConversationID, turn: t.TurnID, maxOutput: s.maxOutput,
		}
	}
	return out, nil
}

// connect returns the client session, starting it on first use.
func (s *Source) connect(ctx context.Context) (*connection, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.conn != nil {
		return s.conn, nil
	}
	st, ct := mcp.NewInMemoryTransports()
	// The sessions outlive this call: their connections ignore ctx's
	// cancellation and end with Close.
	ss, err := s.server.Connect(ctx, st, nil)
	if err != nil {
		return nil, err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "talkide-worker", Version: Version}, nil)
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		ss.Close()
		ss.Wait()
		return nil, err
	}
	conn := &connection{client: cs, server: ss}
	for def, err := range cs.Tools(ctx, nil) {
		if err != nil {
			conn.close()
			return nil, fmt.Errorf("listing tools: %w", err)
		}
		schema, err := json.Marshal(def.InputSchema)
		if err != nil {
			conn.close()
			return nil, fmt.Errorf("tool %s: input schema: %w", def.Name, err)
		}
		conn.tools = append(conn.tools, listedTool{def: def, schema: schema})
	}
	s.conn = conn
	return conn, nil
}

// Close ends the client session and waits for both ends to stop. Calls in
// flight fail; Tools fails from now on.
func (s *Source) Close() error {
	s.mu.Lock()
	conn := s.conn
	s.conn, s.closed = nil, true
	s.mu.Unlock()
	if conn == nil {
		return nil
	}
	return conn.close()
}

func (c *connection) close() error {
	err := c.client.Close()
	c.server.Wait()
	if errors.Is(err, mcp.ErrConnectionClosed) {
		err = nil
	}
	return err
}

// mcpTool is one MCP tool offered to the model for one turn.
type mcpTool struct {
	session            *mcp.ClientSession
	def                *mcp.Tool
	schema             []byte
	name               string
	conversation, turn string
	maxOutput          int
}

func (t *mcpTool) Name() string        { return t.name }
func (t *mcpTool) Description() string { return t.def.Description }

func (t *mcpTool) InputSchema() map[string]any {
	var m map[string]any
	if err := json.Unmarshal(t.schema, &m); err != nil || m == nil {
		return map[string]any{"type": "object"}
	}
	return m
}

// Run calls the tool. The server's refusals and failures are results the
// model sees (IsError); only a cancelled ctx is a Go error.
func (t *mcpTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	args := json.RawMessage(call.Input)
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}")
	}
	if !json.Valid(args) {
		return tools.Result{Output: "invalid input: the input must be a JSON object", IsError: true}, nil
	}
	res, err := t.session.CallTool(ctx, &mcp.CallToolParams{
		Meta:      mcp.Meta{MetaConversation: t.conversation, MetaTurn: t.turn, MetaToolUse: call.ID},
		Name:      t.def.Name,
		Arguments: args,
	})
	if err != nil {
		if ctx.Err() != nil {
			return tools.Result{}, ctx.Err()
		}
		return tools.Result{Output: fmt.Sprintf("MCP server %s could not run %s: %v", ServerName, t.def.Name, err), IsError: true}, nil
	}
	return tools.Result{Output: tools.CapOutput(call, servers.Render(res), t.maxOutput), IsError: res.IsError}, nil
}
