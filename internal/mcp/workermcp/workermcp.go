// Package workermcp serves the worker's own tools — the
// talkide-issue-tracking server and Build — over MCP's streamable HTTP
// transport to a harness that runs in a subprocess (the Claude Code CLI),
// which cannot reach them in-process as the native harness does.
//
// It is mounted on the LocalGatewayProxy's loopback listener, under
// /<conversationId>/mcp/<server>, the one port a conversation's sandbox may
// connect to. A request must carry the conversation's capability as its
// bearer token; the conversation a call acts for is the one the capability
// was made for, and the turn and tool_use id come from the harness's record
// of the running turn (Options.Resolve). Nothing the model or the CLI sends
// can change them.
package workermcp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/build"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/mcp/issuetracking"
)

// BuildServer is the name of the server offering Build: its tool is
// mcp__talkide-build__Build in the CLI.
const BuildServer = "talkide-build"

// ServerNames are the servers the endpoint serves, in the order the CLI is
// given them.
var ServerNames = []string{issuetracking.ServerName, BuildServer}

// MaxBody bounds one request body. The largest input a tool takes is an
// issue's 20 KiB body; a JSON-RPC batch of a few calls fits many times over.
const MaxBody = 1 << 20

// SessionTimeout closes an MCP session without a request for this long: a
// CLI killed by an interrupt never says goodbye.
const SessionTimeout = 30 * time.Minute

// CallTimeout is how long a client should wait for one call of server
// before it gives up: a build's longest allowed run and its wind-down for
// Build, ten minutes (the native harness's bound on an MCP call) for the
// issue tracker, whose calls are a control-plane request each.
func CallTimeout(server string) time.Duration {
	if server == BuildServer {
		return build.MaxTimeout + 5*time.Minute
	}
	return 10 * time.Minute
}

// ClaudeCodeToolUseMeta is the _meta key in which the Claude Code CLI names
// the tool_use a tools/call serves.
const ClaudeCodeToolUseMeta = "claudecode/toolUseId"

// Resolver ties a tools/call for conversation conv to the harness's record:
// the running turn, the model's tool_use id of tool (mcp__<server>__<name>)
// it serves, given or not by the client as claimed, and a context that ends
// with the turn. An error means the call is refused.
type Resolver func(ctx context.Context, conv, tool, claimed string) (t *harness.Turn, toolUseID string, turnCtx context.Context, err error)

// Options configure New. Capability and Resolve are required.
type Options struct {
	// Capability is the credential of a conversation
	// (localproxy.Proxy.Capability).
	Capability func(conversationID string) string
	// Resolve ties calls to turns (claudecode.Harness.ResolveCall).
	Resolve Resolver
	// Issues is the control-plane client of the issue tracker; nil leaves
	// the talkide-issue-tracking server out.
	Issues *issuetracking.Client
	// Builds runs Build; nil leaves the talkide-build server out.
	Builds build.Runner
	// MaxOutputBytes caps a Build result for the model; default
	// tools.DefaultMaxOutputBytes.
	MaxOutputBytes int
	Logger         *slog.Logger // nil: don't log
}

// Handler is the MCP endpoint: an http.Handler for
// /<conversationId>/mcp/<server>.
type Handler struct {
	opts    Options
	log     *slog.Logger
	servers map[string]http.Handler // by server name
}

// New returns the endpoint. It panics without Capability or Resolve, a
// programmer error.
func New(opts Options) *Handler {
	if opts.Capability == nil || opts.Resolve == nil {
		panic("workermcp: New needs Capability and Resolve")
	}
	defaults.Logger(&opts.Logger)
	h := &Handler{opts: opts, log: opts.Logger, servers: make(map[string]http.Handler)}
	if opts.Issues != nil {
		s := issuetracking.NewServer(opts.Issues, &issuetracking.ServerOptions{Logger: opts.Logger.With("server", issuetracking.ServerName)})
		h.mount(issuetracking.ServerName, s)
	}
	if opts.Builds != nil {
		h.mount(BuildServer, newBuildServer(opts.Builds, opts.MaxOutputBytes, opts.Logger))
	}
	return h
}

// Servers are the names of the servers this endpoint serves.
func (h *Handler) Servers() []string {
	var out []string
	for _, n := range ServerNames {
		if h.servers[n] != nil {
			out = append(out, n)
		}
	}
	return out
}

// mount serves s under its name, each call scoped by the capability.
func (h *Handler) mount(name string, s *mcp.Server) {
	s.AddReceivingMiddleware(h.scope(name))
	sh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		SessionTimeout: SessionTimeout,
		Logger:         h.log,
	})
	h.servers[name] = auth.RequireBearerToken(h.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(sh)
}

// verify checks that the bearer token is the capability of the
// conversation the path names; the conversation becomes the token's user,
// which the SDK also holds every later request of the session to.
func (h *Handler) verify(_ context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
	conv, _, err := parsePath(r.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(h.opts.Capability(conv))) != 1 {
		return nil, fmt.Errorf("%w: the credential is not this conversation's capability", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: conv}, nil
}

// errPathShape answers a path that is not /<conversationId>/mcp/<server>.
var errPathShape = errors.New("the path must be /<conversationId>/mcp/<server>")

// parsePath reads /<conversationId>/mcp/<server> (escaped: an id with an
// encoded "/" fails validation instead of becoming two segments).
func parsePath(u *url.URL) (conv, server string, err error) {
	parts := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	if len(parts) != 3 || parts[1] != "mcp" {
		return "", "", errPathShape
	}
	if conv, err = url.PathUnescape(parts[0]); err == nil {
		err = contract.ValidateConversationID(conv)
	}
	if err != nil {
		return "", "", errors.New("the path must start with a valid conversation id")
	}
	return conv, parts[2], nil
}

// ServeHTTP serves one MCP request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	conv, server, err := parsePath(r.URL)
	if errors.Is(err, errPathShape) {
		writeError(w, http.StatusNotFound, contract.CodeNotFound, err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, contract.CodeInvalidID, err.Error())
		return
	}
	// Checked here for a JSON answer; the SDK's bearer check behind it,
	// which answers in plain text, then only records the conversation.
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(tok), []byte(h.opts.Capability(conv))) != 1 {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, http.StatusUnauthorized, contract.CodeUnauthorized, "the credential is not this conversation's capability")
		return
	}
	sh := h.servers[server]
	if sh == nil {
		writeError(w, http.StatusNotFound, contract.CodeNotFound, fmt.Sprintf("no MCP server %q here; the servers are %s", server, strings.Join(h.Servers(), ", ")))
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	}
	sh.ServeHTTP(w, r)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`, code, msg)
}

// callKey carries a resolved call to the tool handlers.
type callKey struct{}

// resolvedCall is a tools/call tied to the running turn.
type resolvedCall struct {
	turn      *harness.Turn
	toolUseID string
}

func callFrom(ctx context.Context) (resolvedCall, bool) {
	c, ok := ctx.Value(callKey{}).(resolvedCall)
	return c, ok
}

// scope is the receiving middleware of server name: a tools/call is tied
// to the conversation of the session's capability and to the running
// turn's tool_use, or refused as a tool error, before any handler runs.
// The talkide.dev/ keys of _meta, which the in-process issue tracker reads
// its scope from, are replaced with what was resolved; whatever the client
// put there is dropped. The call's context ends with the turn, so that an
// interrupt (the CLI killed, its requests never cancelled) stops a build.
func (h *Handler) scope(server string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/call" {
				return next(ctx, method, req)
			}
			ctr, ok := req.(*mcp.ServerRequest[*mcp.CallToolParamsRaw])
			if !ok || ctr.Params == nil {
				return nil, errors.New("workermcp: unexpected tools/call request")
			}
			var conv string
			if ctr.Extra != nil && ctr.Extra.TokenInfo != nil {
				conv = ctr.Extra.TokenInfo.UserID
			}
			if contract.ValidateConversationID(conv) != nil {
				// Only a request the bearer check passed reaches here.
				return nil, errors.New("workermcp: the call carries no conversation")
			}
			meta := ctr.Params.GetMeta()
			claimed, _ := meta[ClaudeCodeToolUseMeta].(string)
			if contract.ValidateID("tool_use id", claimed) != nil {
				claimed = ""
			}
			tool := "mcp__" + server + "__" + ctr.Params.Name
			log := h.log.With("conversation", conv, "tool", tool)
			turn, id, turnCtx, err := h.opts.Resolve(ctx, conv, tool, claimed)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				log.Warn("MCP call refused: it matches no tool call of the running turn", "claimed_tool_use", claimed, "err", err)
				return errorResult("refused: this call does not belong to a tool call of this conversation's running turn (" + err.Error() + ")"), nil
			}
			clean := mcp.Meta{}
			for k, v := range meta {
				if !strings.HasPrefix(k, "talkide.dev/") {
					clean[k] = v
				}
			}
			clean[issuetracking.MetaConversation] = conv
			clean[issuetracking.MetaTurn] = turn.TurnID
			clean[issuetracking.MetaToolUse] = id
			ctr.Params.SetMeta(clean)
			ctx, cancel := context.WithCancel(context.WithValue(ctx, callKey{}, resolvedCall{turn: turn, toolUseID: id}))
			defer cancel()
			stop := context.AfterFunc(turnCtx, cancel)
			defer stop()
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.CallToolResult); ok && r != nil && len(r.Content) > 0 {
				// The CLI shows the model a result's structured content in
				// place of its text when it has both; the text is what the
				// tools write for the model (it says, for one, that a
				// replayed call filed nothing new).
				r.StructuredContent = nil
			}
			return res, err
		}
	}
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true}
}
