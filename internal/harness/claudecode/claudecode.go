// Package claudecode is the second harness: it runs the Claude Code CLI
// headless, one long-lived process per active session speaking stream-json
// on stdin and stdout, and maps its output onto the contract's events.
//
// The CLI reaches the model only through the LocalGatewayProxy:
// ANTHROPIC_BASE_URL=http://127.0.0.1:<port>/<conversationId>, the
// conversation's capability as ANTHROPIC_AUTH_TOKEN, no ANTHROPIC_API_KEY,
// and nothing else of the worker's environment. Its own state (config,
// session transcripts) lives under the session's directory, so a restarted
// worker resumes the CLI's session with --resume.
package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/atomicfile"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/sandbox"
)

// Name is the harness's name in session metadata and flags.
const Name = "claude-code"

// Defaults.
const (
	DefaultPermissionMode = "acceptEdits"
	DefaultMaxTurns       = 100
	DefaultPath           = "/usr/local/bin:/usr/bin:/bin"
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultMaxLineBytes   = 16 << 20
	DefaultMaxToolOutput  = 64 << 10
)

// DefaultAllowedTools are the CLI's tools a turn may use without a
// permission prompt: the headless toolset. Nothing can answer a prompt
// (the CLI runs with --permission-prompts none), so a tool outside this
// list that would prompt is refused, and the model sees the refusal.
var DefaultAllowedTools = []string{"Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "TodoWrite", "Task", "Agent", "NotebookEdit"}

// stateFile is the harness's own file in the session directory.
const stateFile = "claude-code.json"

// Proxy is how a conversation's CLI reaches the model: the
// LocalGatewayProxy. Both functions are required; they are called each time
// a CLI starts, so they may name a proxy that starts after New.
type Proxy struct {
	// BaseURLFor is the ANTHROPIC_BASE_URL of a conversation's CLI: the
	// LocalGatewayProxy's http://127.0.0.1:<port>/<conversationId>.
	BaseURLFor func(conversationID string) string
	// Capability is the credential the CLI presents to the proxy
	// (ANTHROPIC_AUTH_TOKEN).
	Capability func(conversationID string) string
}

// Options configure the harness; the zero value of each field means its
// default.
type Options struct {
	// Model is passed as --model; empty leaves the CLI's default.
	Model string
	// PermissionMode is --permission-mode; default DefaultPermissionMode.
	// (As root the CLI refuses bypassPermissions.)
	PermissionMode string
	// AllowedTools is --allowedTools; nil means DefaultAllowedTools, an
	// empty non-nil slice passes none.
	AllowedTools []string
	// MaxTurns is --max-turns, the turn's limit on model calls; default
	// DefaultMaxTurns.
	MaxTurns int
	// Path is the CLI's PATH (its Bash tool finds commands there); default
	// DefaultPath.
	Path string
	// ExtraEnv is added to the CLI's environment, as KEY=VALUE. It may not
	// set a variable the harness sets, nor ANTHROPIC_API_KEY.
	ExtraEnv []string
	// ExtraArgs are added to the CLI's command line.
	ExtraArgs []string
	// IdleTimeout stops a session's CLI after this long without a turn;
	// the next turn starts it again with --resume. Default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxLineBytes bounds one line of the CLI's output; a longer line is
	// dropped (and logged). Default DefaultMaxLineBytes.
	MaxLineBytes int
	// MaxToolOutput bounds a tool result shown in tool.finished; default
	// DefaultMaxToolOutput. (The model gets what the CLI gives it.)
	MaxToolOutput int
	// MCPServers are the worker's own MCP servers each CLI is given
	// (--mcp-config, with --strict-mcp-config so that no other
	// configuration, a workspace's .mcp.json among them, adds or shadows
	// one); their tools are added to the allowed tools.
	MCPServers []MCPServer
	// CallWait bounds ResolveCall's wait for a tool call to show in the
	// CLI's output; default DefaultCallWait.
	CallWait time.Duration
	Logger   *slog.Logger // nil: don't log
	Now      func() time.Time
}

// managedEnv are the variables the harness sets itself.
var managedEnv = []string{
	"PATH", "HOME", "CLAUDE_CONFIG_DIR", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN",
	"DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER", "DISABLE_ERROR_REPORTING", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
	"CLAUDE_CODE_MAX_RETRIES",
	mcpTokenEnv, "ENABLE_TOOL_SEARCH",
	"ANTHROPIC_API_KEY",
}

// cliMaxRetries is the CLI's CLAUDE_CODE_MAX_RETRIES. By default the CLI
// retries a 429 or 5xx ten times, its pauses doubling to about 40 s:
// more than three minutes in which the turn shows nothing. Five retries
// take about 18 s, about what the native harness's SDK spends on its two
// (docs/harnesses.md). A budget denial that cannot pass soon is not
// retried at all (the gateway says x-should-retry: false).
const cliMaxRetries = 5

// Harness runs turns through Claude Code CLI processes. Close it to stop
// them.
type Harness struct {
	bin     string
	install string // the CLI's installation, readable in its sandbox
	proxy   Proxy
	opts    Options
	log     *slog.Logger

	mu sync.Mutex
	// guarded by mu
	procs  map[string]*proc       // by conversation id: the running CLIs
	turns  map[string]*activeTurn // by conversation id: the running turns
	closed bool

	// trace, when set (by tests), sees every line the CLI prints in a turn.
	trace func(conv string, line []byte)
}

// ErrClosed is the cause of a turn started after Close.
var ErrClosed = errors.New("claudecode: harness closed")

// ErrBadOptions is returned by New for arguments it cannot run with.
var ErrBadOptions = errors.New("claudecode: bad options")

// New returns the harness running the claude executable bin, whose CLIs
// reach the model through proxy. A missing bin or proxy function, or an
// ExtraEnv entry that is not KEY=VALUE or sets a variable the harness owns,
// is an error wrapping ErrBadOptions.
func New(bin string, proxy Proxy, opts *Options) (*Harness, error) {
	if bin == "" || proxy.BaseURLFor == nil || proxy.Capability == nil {
		return nil, fmt.Errorf("%w: the executable and both Proxy functions are required", ErrBadOptions)
	}
	o := defaults.Copy(opts)
	for _, kv := range o.ExtraEnv {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: ExtraEnv entry %q is not KEY=VALUE", ErrBadOptions, kv)
		}
		if slices.Contains(managedEnv, k) {
			return nil, fmt.Errorf("%w: ExtraEnv may not set %s", ErrBadOptions, k)
		}
	}
	defaults.IfZero(&o.PermissionMode, DefaultPermissionMode)
	if o.AllowedTools == nil {
		o.AllowedTools = DefaultAllowedTools
	}
	defaults.IfNotPositive(&o.MaxTurns, DefaultMaxTurns)
	defaults.IfZero(&o.Path, DefaultPath)
	defaults.IfNotPositive(&o.IdleTimeout, DefaultIdleTimeout)
	defaults.IfNotPositive(&o.MaxLineBytes, DefaultMaxLineBytes)
	defaults.IfNotPositive(&o.MaxToolOutput, DefaultMaxToolOutput)
	defaults.Logger(&o.Logger)
	defaults.Clock(&o.Now)
	defaults.IfNotPositive(&o.CallWait, DefaultCallWait)
	for _, s := range o.MCPServers {
		if s.Name == "" || s.URL == nil {
			return nil, fmt.Errorf("%w: an MCP server needs a name and a URL", ErrBadOptions)
		}
	}
	o.MCPServers = append([]MCPServer(nil), o.MCPServers...)
	o.ExtraEnv = append([]string(nil), o.ExtraEnv...)
	o.ExtraArgs = append([]string(nil), o.ExtraArgs...)
	return &Harness{bin: bin, install: installDir(bin), proxy: proxy, opts: o, log: o.Logger, procs: make(map[string]*proc), turns: make(map[string]*activeTurn)}, nil
}

// installDir is what the CLI's sandbox must be able to read of its
// installation: the node_modules directory its executable lives in (an
// npm install links bin/claude to the package beside it), or the
// executable's own directory.
func installDir(bin string) string {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		real = bin
	}
	for d := filepath.Dir(real); d != "/" && d != "."; d = filepath.Dir(d) {
		if filepath.Base(d) == "node_modules" {
			return d
		}
	}
	return filepath.Dir(real)
}

// Name implements harness.Harness.
func (h *Harness) Name() string { return Name }

// RunTurn implements harness.Harness: it sends the user's message to the
// conversation's CLI (starting it, with --resume when the session has one)
// and maps the CLI's output until the turn's result line.
func (h *Harness) RunTurn(ctx context.Context, t *harness.Turn) (harness.Result, error) {
	log := h.log.With("conversation", t.ConversationID, "turn", t.TurnID)
	user, _ := json.Marshal(struct {
		Role    string     `json:"role"`
		Content []apiBlock `json:"content"`
	}{"user", []apiBlock{{Type: "text", Text: t.Text}}})
	if err := t.Transcript.Append(user); err != nil {
		return harness.Result{}, persistErr(err)
	}
	line, _ := json.Marshal(struct {
		Type            string          `json:"type"`
		Message         json.RawMessage `json:"message"`
		ParentToolUseID *string         `json:"parent_tool_use_id"`
	}{"user", user, nil})
	line = append(line, '\n')
	at, end := h.beginTurn(ctx, t)
	defer end()

	for attempt := 0; ; attempt++ {
		p, err := h.acquire(ctx, t, log)
		if err != nil {
			return harness.Result{}, err
		}
		res, err, resumeFailed := h.turn(ctx, p, t, at, line, log)
		if resumeFailed && attempt == 0 {
			// The CLI could not find its session (its state was lost):
			// start a new one rather than failing every turn from now on.
			p.stop()
			h.release(t.ConversationID, p)
			log.Warn("claude code could not resume its session; starting a new one", "detail", p.exitDetail())
			if err := os.Remove(filepath.Join(t.SessionDir, stateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return harness.Result{}, persistErr(err)
			}
			t.Emit(contract.Event{Kind: contract.KindNotice, Text: "Claude Code could not resume this conversation's session; it starts a new one, without the earlier history"})
			continue
		}
		h.release(t.ConversationID, p)
		return res, err
	}
}

// turn runs one turn on p. resumeFailed reports that p was started with
// --resume and failed before it began the session.
func (h *Harness) turn(ctx context.Context, p *proc, t *harness.Turn, at *activeTurn, line []byte, log *slog.Logger) (res harness.Result, err error, resumeFailed bool) {
	m := newMapper(t, h.opts.Now, log, h.opts.MaxToolOutput)
	m.started = func(id, name string) { h.toolStarted(at, id, name) }
	m.reply = func(b []byte) {
		go p.send(context.Background(), b)
	}
	// Lines printed between turns belong to no turn.
	for drained := false; !drained; {
		select {
		case l, ok := <-p.lines:
			if !ok {
				drained = true
				break
			}
			log.Debug("claude code printed a line between turns; ignored", "bytes", len(l))
		default:
			drained = true
		}
	}
	defer func() {
		if m.sessionID != "" {
			if serr := saveState(t.SessionDir, state{SessionID: m.sessionID}); serr != nil && err == nil {
				err = persistErr(serr)
			}
		}
	}()
	if err := p.send(ctx, line); err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err(), false
		}
		// The process died before it read the message; what it said
		// on the way out is in its stderr.
		<-p.exited
		log.Warn("claude code exited before it took the message", "detail", p.exitDetail())
		if p.resumed {
			return res, nil, true
		}
		return res, crashed(p), false
	}
	for {
		select {
		case <-ctx.Done():
			p.stop()
			m.interrupted()
			return res, ctx.Err(), false
		case l, ok := <-p.lines:
			if !ok {
				<-p.exited
				if ctx.Err() != nil {
					m.interrupted()
					return res, ctx.Err(), false
				}
				log.Warn("claude code exited during a turn", "detail", p.exitDetail())
				if p.resumed && !m.begun() {
					return res, nil, true
				}
				m.closeOpenTools("Claude Code stopped during this tool call.")
				return res, crashed(p), false
			}
			if h.trace != nil {
				h.trace(t.ConversationID, l)
			}
			if len(l) == 1 && l[0] == 0 {
				log.Warn("claude code printed a line over the size limit; dropped", "limit", h.opts.MaxLineBytes)
				continue
			}
			done, res, err := m.handle(l)
			if !done {
				continue
			}
			if err != nil && p.resumed && !m.begun() {
				return res, err, true
			}
			return res, err, false
		}
	}
}

func crashed(p *proc) error {
	return &harness.TurnError{Code: contract.FailInternal, Message: "Claude Code exited unexpectedly; send the message again to continue", Retryable: true,
		Err: fmt.Errorf("claude code exited: %s", p.exitDetail())}
}

// acquire returns the conversation's running CLI, or starts one.
func (h *Harness) acquire(ctx context.Context, t *harness.Turn, log *slog.Logger) (*proc, error) {
	conv := t.ConversationID
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, closedErr()
	}
	if p := h.procs[conv]; p != nil {
		if p.idleTimer != nil {
			p.idleTimer.Stop()
			p.idleTimer = nil
		}
		select {
		case <-p.exited:
			delete(h.procs, conv)
		default:
			p.busy = true
			h.mu.Unlock()
			return p, nil
		}
	}
	h.mu.Unlock()

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := loadState(t.SessionDir)
	if err != nil {
		return nil, &harness.TurnError{Code: contract.FailInternal, Message: "the Claude Code session state could not be read", Err: err}
	}
	home := filepath.Join(t.SessionDir, "claude-code", "home")
	config := filepath.Join(t.SessionDir, "claude-code", "config")
	for _, d := range []string{home, config, t.Workspace} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, &harness.TurnError{Code: contract.FailInternal, Message: "the Claude Code directories could not be created", Retryable: true, Err: err}
		}
	}
	args := h.args(conv, st.SessionID)
	p, err := startProc(t.Jail, h.bin, args, sandbox.Extra{
		Env: h.env(conv, home, config), Dir: t.Workspace,
		// The CLI's own state, and nothing else of the session directory.
		Writable: []string{home, config},
		ReadOnly: []string{h.install},
	}, h.opts.MaxLineBytes)
	if err != nil {
		return nil, &harness.TurnError{Code: contract.FailInternal, Message: "Claude Code could not be started", Retryable: true, Err: err}
	}
	p.resumed = st.SessionID != ""
	log.Info("claude code started", "pid", p.cmd.Process.Pid, "resume", st.SessionID)

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		go p.stop()
		return nil, closedErr()
	}
	h.procs[conv] = p
	p.busy = true
	return p, nil
}

func closedErr() error {
	return &harness.TurnError{Code: contract.FailWorkerRestarted, Message: "the worker is shutting down; send the message again to continue", Retryable: true, Err: ErrClosed}
}

// release ends a turn's use of p: a process still running waits for the
// next turn (until it has been idle too long); one that exited (or was
// stopped by an interrupt) is forgotten.
func (h *Harness) release(conv string, p *proc) {
	h.mu.Lock()
	p.busy = false
	healthy := true
	select {
	case <-p.exited:
		healthy = false
	default:
	}
	if healthy && !h.closed {
		p.idleTimer = time.AfterFunc(h.opts.IdleTimeout, func() { h.idle(conv, p) })
		h.mu.Unlock()
		return
	}
	if h.procs[conv] == p {
		delete(h.procs, conv)
	}
	h.mu.Unlock()
	p.stop()
}

// idle stops p if it is still the conversation's CLI and has had no turn
// since its timer was set.
func (h *Harness) idle(conv string, p *proc) {
	h.mu.Lock()
	if h.procs[conv] != p || p.busy || p.idleTimer == nil {
		h.mu.Unlock()
		return
	}
	delete(h.procs, conv)
	p.idleTimer = nil
	h.mu.Unlock()
	p.stop()
	h.log.Info("claude code stopped after being idle", "conversation", conv, "idle", h.opts.IdleTimeout)
}

// Running reports how many CLI processes are running.
func (h *Harness) Running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.procs)
}

// Close stops every CLI process and waits until they are gone. Turns
// running then fail; later turns fail at once.
func (h *Harness) Close() error {
	h.mu.Lock()
	h.closed = true
	ps := make([]*proc, 0, len(h.procs))
	for conv, p := range h.procs {
		if p.idleTimer != nil {
			p.idleTimer.Stop()
			p.idleTimer = nil
		}
		ps = append(ps, p)
		delete(h.procs, conv)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
	return nil
}

// args is the CLI's command line for conversation conv; resume is the
// session to continue. It holds no credential.
func (h *Harness) args(conv, resume string) []string {
	args := []string{
		"-p",
		"--input-format", "stream-json",
		"--output-format", "stream-json",
		"--verbose",
		"--include-partial-messages",
		"--permission-mode", h.opts.PermissionMode,
		"--permission-prompts", "none",
		"--max-turns", strconv.Itoa(h.opts.MaxTurns),
	}
	allowed := slices.Clone(h.opts.AllowedTools)
	for _, s := range h.opts.MCPServers {
		// A rule naming the server alone allows each of its tools.
		allowed = append(allowed, "mcp__"+s.Name)
	}
	if len(allowed) > 0 {
		args = append(args, "--allowedTools", strings.Join(allowed, ","))
	}
	if len(h.opts.MCPServers) > 0 {
		args = append(args, "--mcp-config", h.mcpConfig(conv), "--strict-mcp-config")
	}
	if h.opts.Model != "" {
		args = append(args, "--model", h.opts.Model)
	}
	if resume != "" {
		args = append(args, "--resume", resume)
	}
	return append(args, h.opts.ExtraArgs...)
}

// env is the CLI's complete environment: nothing of the worker's.
func (h *Harness) env(conv, home, config string) []string {
	env := []string{
		"PATH=" + h.opts.Path,
		"HOME=" + home,
		"CLAUDE_CONFIG_DIR=" + config,
		"ANTHROPIC_BASE_URL=" + h.proxy.BaseURLFor(conv),
		"ANTHROPIC_AUTH_TOKEN=" + h.proxy.Capability(conv),
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"CLAUDE_CODE_MAX_RETRIES=" + strconv.Itoa(cliMaxRetries),
	}
	if len(h.opts.MCPServers) > 0 {
		env = append(env,
			mcpTokenEnv+"="+h.proxy.Capability(conv),
			// The CLI otherwise holds MCP tools back behind a search tool
			// when a model supports one; the worker's few tools are meant
			// to be in every request, as they are for the native harness.
			"ENABLE_TOOL_SEARCH=false")
	}
	return append(env, h.opts.ExtraEnv...)
}

// state is the harness's record in the session directory.
type state struct {
	// SessionID is the CLI's session, continued with --resume.
	SessionID string `json:"session_id"`
}

func loadState(dir string) (state, error) {
	var st state
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		// A torn write: start a new CLI session rather than never again.
		return state{}, nil
	}
	return st, nil
}

// saveState writes the state when it changed, atomically.
func saveState(dir string, st state) error {
	if old, err := loadState(dir); err == nil && old == st {
		return nil
	}
	b, _ := json.Marshal(st)
	return atomicfile.WriteFile(filepath.Join(dir, stateFile), append(b, '\n'), 0o600)
}
