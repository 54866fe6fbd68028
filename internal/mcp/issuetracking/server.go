// Package issuetracking is the talkide-issue-tracking MCP server:
// Mara files, lists and comments on issues of her conversation, and the
// control-plane, reached over the signed worker channel, stores them. Source
// offers the server's tools to the native harness in-process.
package issuetracking

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
)

// The server's MCP identity.
const (
	ServerName = "talkide-issue-tracking"
	Version    = "1.0.0"
)

// Keys in a tools/call request's _meta that scope the call to the
// conversation, turn and tool_use that make it. The server acts only for the
// conversation named there; Source sets them on every call from the
// conversation's turn, and the model neither sees nor sets them. Served over
// HTTP (internal/mcp/workermcp), they are replaced with what the caller's
// capability and the harness's running turn say, whatever the client sent.
const (
	MetaConversation = "talkide.dev/conversation_id"
	MetaTurn         = "talkide.dev/turn_id"
	MetaToolUse      = "talkide.dev/tool_use_id"
)

// ServerOptions configure NewServer; nil is the zero value.
type ServerOptions struct {
	// Logger receives a line per issue filed or commented, and the causes
	// of control-plane failures. Nil means don't log.
	Logger *slog.Logger
}

const instructions = `Issue tracking for this TalkIDE conversation. File an issue (report_issue) for a problem you find that you cannot or should not fix now — a bug, a flaky test, a missing dependency, a risk the user should know about — so the user sees it in their issue list. List the conversation's issues (list_issues) before filing, to avoid duplicates, and comment on an existing one (comment_issue) instead; close it with a comment when it is resolved.`

// NewServer returns the talkide-issue-tracking MCP server; its tools call
// the control-plane through cp.
func NewServer(cp *Client, opts *ServerOptions) *mcp.Server {
	o := defaults.Copy(opts)
	defaults.Logger(&o.Logger)
	h := &handlers{cp: cp, log: o.Logger}
	s := mcp.NewServer(&mcp.Implementation{Name: ServerName, Title: "TalkIDE issue tracking", Version: Version},
		&mcp.ServerOptions{Instructions: instructions})
	mcp.AddTool(s, reportIssueTool(), h.reportIssue)
	mcp.AddTool(s, listIssuesTool(), h.listIssues)
	mcp.AddTool(s, commentIssueTool(), h.commentIssue)
	return s
}

// handlers hold what the tools share.
type handlers struct {
	cp  *Client
	log *slog.Logger
}

// scope is who makes a call.
type scope struct {
	conversation, turn, toolUse string
}

// errNoScope answers a call that names no conversation.
var errNoScope = errors.New("this call names no TalkIDE conversation (_meta " + MetaConversation + "); the issue tracker acts only for a conversation")

func scopeOf(req *mcp.CallToolRequest) (scope, error) {
	m := req.Params.GetMeta()
	str := func(k string) string { s, _ := m[k].(string); return s }
	sc := scope{conversation: str(MetaConversation), turn: str(MetaTurn), toolUse: str(MetaToolUse)}
	if contract.ValidateConversationID(sc.conversation) != nil {
		return scope{}, errNoScope
	}
	if contract.ValidateID("turn id", sc.turn) != nil {
		sc.turn = ""
	}
	return sc, nil
}

// key returns the idempotency key of what the call kind does: the same for
// every retry of one tool_use, so that a retried call files nothing twice.
// A call without a tool_use id gets a random key.
func (sc scope) key(kind string) string {
	id := sc.toolUse
	if id == "" {
		id = contract.NewID("")
	}
	k := sc.conversation + "/" + kind + "-" + id
	if len(k) > contract.MaxIdempotencyKey {
		sum := sha256.Sum256([]byte(id))
		k = sc.conversation + "/" + kind + "-" + hex.EncodeToString(sum[:16])
	}
	return k
}

func (sc scope) logger(l *slog.Logger) *slog.Logger {
	return l.With("conversation", sc.conversation, "turn", sc.turn)
}

// failure turns a control-plane failure into the error the model sees:
// the control-plane's own message when it refused the request, otherwise
// a plain statement that it could not be reached (the cause goes to the
// log).
func (h *handlers) failure(ctx context.Context, sc scope, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ae *APIError
	if errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
		return fmt.Errorf("%s: the control-plane refused: %s", what, ae.Message)
	}
	sc.logger(h.log).Warn("issue tracker: the control-plane call failed", "op", what, "err", err)
	return fmt.Errorf("%s: the control-plane could not be reached; nothing was changed, try again later", what)
}

// textResult is a result whose text is for the model, with structured
// content beside it for other MCP clients.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
