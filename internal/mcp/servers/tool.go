package servers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/tools"
)

// ToolName returns the name under which tool tool of server server is
// offered to the model: mcp__<server>__<tool>, with characters outside
// A-Z a-z 0-9 _ - replaced by "_", and shortened with a hash of the real
// names when longer than MaxToolName.
func ToolName(server, tool string) string {
	b := []byte(tool)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	name := "mcp__" + server + "__" + string(b)
	if len(name) <= MaxToolName {
		return name // offer() disambiguates names that sanitizing made equal
	}
	return hashedName(name, server, tool)
}

// hashedName cuts name to leave room for "_" and 8 hex digits of a hash of
// the real names.
func hashedName(name, server, tool string) string {
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	suffix := "_" + hex.EncodeToString(sum[:4])
	return name[:min(len(name), MaxToolName-len(suffix))] + suffix
}

// offer turns a server's tools into the tools offered to the model, sorted
// by name so that the request's tool list — and its prompt cache — is
// stable. A tool that cannot be offered is skipped and reported.
func (s *Source) offer(c *conversation, srv *server) ([]tools.Tool, []error) {
	srv.mu.Lock()
	listed := append([]*mcp.Tool(nil), srv.tools...)
	srv.mu.Unlock()
	var problems []error
	if len(listed) > maxToolsPerServer {
		problems = append(problems, &ServerError{Server: srv.cfg.Name, Err: fmt.Errorf("it has more than %d tools; only the first %d are offered", maxToolsPerServer, maxToolsPerServer)})
		listed = listed[:maxToolsPerServer]
	}
	sort.Slice(listed, func(i, j int) bool { return listed[i].Name < listed[j].Name })
	taken := map[string]bool{}
	var out []tools.Tool
	for _, t := range listed {
		name := ToolName(srv.cfg.Name, t.Name)
		if taken[name] {
			name = hashedName(name, srv.cfg.Name, t.Name)
		}
		if taken[name] || t.Name == "" {
			problems = append(problems, &ServerError{Server: srv.cfg.Name, Err: fmt.Errorf("tool %q is offered twice; skipped", shorten(t.Name))})
			continue
		}
		schema, err := inputSchema(t.InputSchema)
		if err != nil {
			problems = append(problems, &ServerError{Server: srv.cfg.Name, Err: fmt.Errorf("tool %q skipped: %v", shorten(t.Name), err)})
			continue
		}
		taken[name] = true
		out = append(out, &mcpTool{
			name: name, remote: t.Name, description: description(srv.cfg.Name, t),
			schema: schema, srv: srv, conv: c,
			callTimeout: s.opts.CallTimeout, maxOutput: s.opts.MaxOutputBytes,
		})
	}
	return out, problems
}

// inputSchema returns the JSON of a tool's input schema, which the
// Messages API wants to be an object schema.
func inputSchema(v any) ([]byte, error) {
	if v == nil {
		return []byte(`{"type":"object","properties":{}}`), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, errors.New("its input schema cannot be encoded")
	}
	if len(b) > maxSchemaBytes {
		return nil, fmt.Errorf("its input schema is larger than %d bytes", maxSchemaBytes)
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil, errors.New("its input schema is not a JSON object")
	}
	if m["type"] != "object" {
		return nil, errors.New(`its input schema is not of "type": "object"`)
	}
	return b, nil
}

// description is the text the model sees for a tool.
func description(server string, t *mcp.Tool) string {
	d := strings.TrimSpace(t.Description)
	if d == "" {
		d = strings.TrimSpace(t.Title)
	}
	if d == "" {
		d = fmt.Sprintf("Tool %s of the MCP server %s.", t.Name, server)
	}
	if len(d) > maxDescriptionBytes {
		i := maxDescriptionBytes - len("…")
		for i > 0 && !utf8.RuneStart(d[i]) {
			i--
		}
		d = d[:i] + "…"
	}
	return strings.ToValidUTF8(d, "\uFFFD")
}

// mcpTool is one tool of a running server, offered to the model.
type mcpTool struct {
	name        string // as offered
	remote      string // the server's name for it
	description string
	schema      []byte
	srv         *server
	conv        *conversation
	callTimeout time.Duration
	maxOutput   int
}

func (t *mcpTool) Name() string        { return t.name }
func (t *mcpTool) Description() string { return t.description }

func (t *mcpTool) InputSchema() map[string]any {
	var m map[string]any
	json.Unmarshal(t.schema, &m)
	return m
}

// Run calls the tool. The server's failure to answer, an MCP error and a
// result the server marks as an error are results the model sees; only a
// cancelled ctx is a Go error.
func (t *mcpTool) Run(ctx context.Context, call tools.Call) (tools.Result, error) {
	if err := ctx.Err(); err != nil {
		return tools.Result{}, err
	}
	args := bytes.TrimSpace(call.Input)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	if args[0] != '{' || !json.Valid(args) {
		return tools.Result{Output: "invalid input: the input must be a JSON object", IsError: true}, nil
	}
	server := t.srv.cfg.Name
	if !t.srv.alive() {
		return t.notRunning(), nil
	}
	t.conv.active.Add(1)
	defer func() {
		t.conv.touch()
		t.conv.active.Add(-1)
	}()

	cctx, cancel := context.WithTimeout(ctx, t.callTimeout)
	defer cancel()
	stop := context.AfterFunc(t.srv.life, cancel) // the server is being stopped
	defer stop()
	res, err := t.srv.cs.CallTool(cctx, &mcp.CallToolParams{Name: t.remote, Arguments: json.RawMessage(args)})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return tools.Result{}, ctx.Err()
	case !t.srv.alive() || errors.Is(err, mcp.ErrConnectionClosed):
		t.srv.lost()
		return t.notRunning(), nil
	case cctx.Err() != nil:
		return tools.Result{Output: fmt.Sprintf("The MCP server %q did not answer within %v; the call was cancelled.", server, t.callTimeout), IsError: true}, nil
	default:
		return tools.Result{Output: tools.CapOutput(call, fmt.Sprintf("MCP error from server %q: %v", server, err), t.maxOutput), IsError: true}, nil
	}
	return tools.Result{Output: tools.CapOutput(call, Render(res), t.maxOutput), IsError: res.IsError}, nil
}

func (t *mcpTool) notRunning() tools.Result {
	why := t.srv.endReason()
	if why == "" {
		why = "it stopped"
	}
	return tools.Result{
		Output:  fmt.Sprintf("The MCP server %q is not running (%s). It is started again at the user's next message; do not retry now.", t.srv.cfg.Name, why),
		IsError: true,
	}
}
