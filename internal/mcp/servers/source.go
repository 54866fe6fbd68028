package servers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/sandbox"
	"github.com/talkide/platform/internal/tools"
)

// Defaults and limits.
const (
	DefaultStartTimeout = 10 * time.Second
	DefaultCallTimeout  = 10 * time.Minute
	DefaultIdleTimeout  = 10 * time.Minute
	DefaultCloseGrace   = 2 * time.Second
	DefaultPath         = "/usr/local/bin:/usr/bin:/bin"

	// MaxToolName is the longest tool name offered to the model, the
	// Messages API's limit; longer names are shortened with a hash.
	MaxToolName = 64

	maxToolsPerServer   = 128
	maxDescriptionBytes = 2048
	maxSchemaBytes      = 64 << 10

	// A server that failed to start is tried again on a later turn, after a
	// delay that doubles from minRetryDelay up to maxRetryDelay.
	minRetryDelay = 5 * time.Second
	maxRetryDelay = 5 * time.Minute
)

// ErrClosed is returned by Tools once the source is closed.
var ErrClosed = errors.New("MCP servers are shutting down")

// ErrStartFailed is wrapped by the error of a server that did not start,
// did not list its tools, or ended and could not be started again.
var ErrStartFailed = errors.New("failed to start")

// ServerError is a problem with one declared server. Tools returns them
// joined; they say what failed without header or variable values.
type ServerError struct {
	Server string
	Err    error
}

func (e *ServerError) Error() string { return fmt.Sprintf("MCP server %q: %v", e.Server, e.Err) }
func (e *ServerError) Unwrap() error { return e.Err }

// Options configure a Source; the zero value of each field means its
// default.
type Options struct {
	// AllowList says which declared servers may run; nil allows none.
	AllowList *AllowList
	// StartTimeout bounds starting a server and listing its tools;
	// default DefaultStartTimeout.
	StartTimeout time.Duration
	// CallTimeout bounds one tool call (the turn's context bounds it too);
	// default DefaultCallTimeout.
	CallTimeout time.Duration
	// IdleTimeout is how long a conversation's servers run without a turn
	// or a call before they are stopped; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// CloseGrace is how long a stdio server has to exit once its stdin is
	// closed before its process group is killed; default DefaultCloseGrace.
	CloseGrace time.Duration
	// MaxOutputBytes caps a call's result as the built-in tools' results
	// are capped; default tools.DefaultMaxOutputBytes.
	MaxOutputBytes int
	// Path is the PATH of stdio servers and where their bare command names
	// are looked up; default DefaultPath. The worker's own PATH is never
	// used.
	Path string
	// HTTPTransport carries the requests to HTTP servers; nil means a
	// transport of the source's own, like http.DefaultTransport.
	HTTPTransport http.RoundTripper
	// Logger receives the source's logs; nil means no logging.
	Logger *slog.Logger
}

// Source offers the tools of the MCP servers each conversation's workspace
// declares in .mcp.json, as far as the allow-list permits; it implements
// the native harness's ToolSource. Servers start on a conversation's first
// turn, restart when .mcp.json changes or after they end, and stop after
// IdleTimeout without activity and on Close. It is safe for concurrent use.
type Source struct {
	opts         Options
	log          *slog.Logger
	ownTransport *http.Transport // nil when the caller gave one

	stop        chan struct{} // closed by Close: stops the janitor
	janitorDone chan struct{}

	mu     sync.Mutex // guards convs and closed
	convs  map[string]*conversation
	closed bool
}

// New returns a source and starts its janitor, which Close stops.
func New(opts *Options) *Source {
	o := defaults.Copy(opts)
	defaults.IfNotPositive(&o.StartTimeout, DefaultStartTimeout)
	defaults.IfNotPositive(&o.CallTimeout, DefaultCallTimeout)
	defaults.IfNotPositive(&o.IdleTimeout, DefaultIdleTimeout)
	defaults.IfNotPositive(&o.CloseGrace, DefaultCloseGrace)
	defaults.IfNotPositive(&o.MaxOutputBytes, tools.DefaultMaxOutputBytes)
	defaults.IfZero(&o.Path, DefaultPath)
	defaults.Logger(&o.Logger)
	s := &Source{opts: o, log: o.Logger, stop: make(chan struct{}), janitorDone: make(chan struct{}), convs: make(map[string]*conversation)}
	if o.HTTPTransport == nil {
		s.ownTransport = http.DefaultTransport.(*http.Transport).Clone()
		s.opts.HTTPTransport = s.ownTransport
	}
	go s.janitor(min(max(o.IdleTimeout/4, 10*time.Millisecond), time.Minute))
	return s
}

// Tools implements the native harness's ToolSource: it brings the
// conversation's servers in line with its .mcp.json and returns their
// tools, named mcp__<server>__<tool>. The error, when not nil, joins a
// *ServerError per server that is refused or failed (or says what is wrong
// with .mcp.json); the tools of the other servers are returned with it. A
// refused server or a broken file is reported once per version of the
// file, a failed start each time one is tried.
func (s *Source) Tools(ctx context.Context, t *harness.Turn) ([]tools.Tool, error) {
	if t == nil || t.ConversationID == "" || t.Workspace == "" {
		return nil, errors.New("mcp servers: the turn has no conversation or workspace")
	}
	ws, err := tools.NewWorkspace(t.Workspace)
	if err != nil {
		return nil, errors.New("MCP servers: the conversation's workspace cannot be opened")
	}
	c, err := s.lockConversation(t.ConversationID)
	if err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	defer c.touch()
	log := s.log.With("conversation", t.ConversationID)

	var problems []error
	data, rerr := readConfig(ws)
	if v := configVersion(data, rerr); v != c.version {
		c.version = v
		problems = append(problems, s.reconfigure(c, data, rerr, log)...)
	}
	problems = append(problems, s.ensure(ctx, c, ws.Root(), t.Jail, log)...)

	var out []tools.Tool
	for _, name := range sortedKeys(c.servers) {
		out = append(out, c.offered[name]...)
	}
	return out, errors.Join(problems...)
}

// Close stops every server of every conversation and the janitor, and
// waits until they are gone. Tools fails with ErrClosed afterwards.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.janitorDone
		return nil
	}
	s.closed = true
	convs := slices.Collect(maps.Values(s.convs))
	s.convs = nil
	s.mu.Unlock()
	close(s.stop)
	<-s.janitorDone
	closeConversations(convs)
	if s.ownTransport != nil {
		s.ownTransport.CloseIdleConnections()
	}
	return nil
}

// conversation is one conversation's servers.
type conversation struct {
	id     string
	last   atomic.Int64 // unix nanoseconds of the latest turn or call
	active atomic.Int32 // calls running

	mu       sync.Mutex // serializes Tools and close; guards the fields below
	closed   bool
	version  string                  // of the .mcp.json acted on; "" before the first turn
	want     map[string]ServerConfig // declared and allowed
	servers  map[string]*server      // started; some may have ended since
	offered  map[string][]tools.Tool // per server, its tools as offered to the model
	failures map[string]*retry       // servers that failed to start
}

type retry struct {
	failures int
	at       time.Time // not tried again before
}

func (c *conversation) touch() { c.last.Store(time.Now().UnixNano()) }

// lockConversation returns the conversation, created if need be, locked.
func (s *Source) lockConversation(id string) (*conversation, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		c := s.convs[id]
		if c == nil {
			c = &conversation{id: id, servers: map[string]*server{}, offered: map[string][]tools.Tool{}, failures: map[string]*retry{}}
			s.convs[id] = c
		}
		c.touch() // the janitor leaves it alone from now on
		s.mu.Unlock()
		c.mu.Lock()
		if !c.closed {
			return c, nil
		}
		// Closed by the janitor or Close meanwhile: take a fresh one.
		c.mu.Unlock()
	}
}

// configVersion identifies what readConfig found.
func configVersion(data []byte, err error) string {
	switch {
	case errors.Is(err, errNoConfig):
		return "none"
	case err != nil:
		return "error: " + err.Error()
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// reconfigure acts on a new version of .mcp.json: servers no longer
// declared, no longer allowed or declared differently are stopped, and
// failed servers may be tried at once. It returns the file's problems and
// the refused servers. c.mu is held.
func (s *Source) reconfigure(c *conversation, data []byte, rerr error, log *slog.Logger) []error {
	var problems []error
	cfg := &Config{}
	switch {
	case errors.Is(rerr, errNoConfig):
	case rerr != nil:
		problems = append(problems, rerr)
	default:
		parsed, err := ParseConfig(data)
		if err != nil {
			problems = append(problems, err)
		} else {
			cfg = parsed
		}
	}
	want := make(map[string]ServerConfig, len(cfg.Servers))
	for _, sc := range cfg.Servers {
		if err := s.opts.AllowList.Check(sc); err != nil {
			log.Info("a declared MCP server is not allowed", "server", sc.Name, "err", err)
			problems = append(problems, &ServerError{Server: sc.Name, Err: err})
			continue
		}
		want[sc.Name] = sc
	}
	var stop []*server
	for name, srv := range c.servers {
		if w, ok := want[name]; !ok || !w.equal(srv.cfg) {
			stop = append(stop, srv)
			delete(c.servers, name)
			delete(c.offered, name)
		}
	}
	closeServers(stop)
	c.want = want
	c.failures = map[string]*retry{}
	return problems
}

// ensure starts the wanted servers that are not running and may be tried,
// and refreshes tool lists servers said have changed. c.mu is held.
func (s *Source) ensure(ctx context.Context, c *conversation, dir string, jail *sandbox.Jail, log *slog.Logger) []error {
	now := time.Now()
	var start []ServerConfig
	ended := map[string]string{}
	for _, name := range sortedKeys(c.want) {
		if srv := c.servers[name]; srv != nil {
			if srv.alive() {
				s.refresh(ctx, c, srv, log)
				continue
			}
			ended[name] = srv.endReason()
			log.Warn("an MCP server has ended; starting it again", "server", name, "reason", ended[name])
			srv.close()
			delete(c.servers, name)
			delete(c.offered, name)
		}
		if r := c.failures[name]; r != nil && now.Before(r.at) {
			continue
		}
		start = append(start, c.want[name])
	}
	if len(start) == 0 {
		return nil
	}
	type result struct {
		srv *server
		err error
	}
	results := make([]result, len(start))
	concurrently(len(start), func(i int) {
		sctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
		defer cancel()
		srv, err := startServer(sctx, start[i], startParams{dir: dir, path: s.opts.Path, grace: s.opts.CloseGrace, transport: s.opts.HTTPTransport, jail: jail})
		results[i] = result{srv, err}
	})
	var problems []error
	for i, sc := range start {
		r := results[i]
		if r.err != nil && ctx.Err() != nil {
			continue // the turn was interrupted: not the server's failure; tried again next turn
		}
		if r.err != nil {
			f := c.failures[sc.Name]
			if f == nil {
				f = &retry{}
				c.failures[sc.Name] = f
			}
			f.failures++
			f.at = time.Now().Add(min(minRetryDelay<<(f.failures-1), maxRetryDelay))
			err := fmt.Errorf("%w: %w", ErrStartFailed, r.err)
			if why := ended[sc.Name]; why != "" {
				err = fmt.Errorf("%s, and %w", why, err)
			}
			log.Warn("an MCP server failed to start", "server", sc.Name, "err", r.err, "attempt", f.failures)
			problems = append(problems, &ServerError{Server: sc.Name, Err: err})
			continue
		}
		delete(c.failures, sc.Name)
		c.servers[sc.Name] = r.srv
		offered, skipped := s.offer(c, r.srv)
		c.offered[sc.Name] = offered
		problems = append(problems, skipped...)
		log.Info("MCP server started", "server", sc.Name, "type", sc.Type, "tools", len(offered))
	}
	return problems
}

// refresh lists a server's tools again when it has announced a change. A
// failure keeps the previous list. c.mu is held.
func (s *Source) refresh(ctx context.Context, c *conversation, srv *server, log *slog.Logger) {
	srv.mu.Lock()
	stale := srv.stale
	srv.stale = false
	srv.mu.Unlock()
	if !stale {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	ts, err := srv.listTools(lctx)
	if err != nil {
		log.Warn("an MCP server's new tool list could not be read; keeping the old one", "server", srv.cfg.Name, "err", err)
		return
	}
	srv.mu.Lock()
	srv.tools = ts
	srv.mu.Unlock()
	c.offered[srv.cfg.Name], _ = s.offer(c, srv)
}

// janitor stops the servers of idle conversations until Close.
func (s *Source) janitor(every time.Duration) {
	defer close(s.janitorDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.closeIdle(now)
		}
	}
}

// closeIdle stops the servers of the conversations with neither a turn
// nor a call for IdleTimeout.
func (s *Source) closeIdle(now time.Time) {
	var idle []*conversation
	s.mu.Lock()
	for id, c := range s.convs {
		if c.active.Load() == 0 && now.Sub(time.Unix(0, c.last.Load())) >= s.opts.IdleTimeout {
			idle = append(idle, c)
			delete(s.convs, id)
		}
	}
	s.mu.Unlock()
	for _, c := range idle {
		s.log.Info("stopping the MCP servers of an idle conversation", "conversation", c.id)
	}
	closeConversations(idle)
}

func closeConversations(cs []*conversation) {
	concurrently(len(cs), func(i int) {
		c := cs[i]
		c.mu.Lock()
		defer c.mu.Unlock()
		c.closed = true
		servers := slices.Collect(maps.Values(c.servers))
		c.servers, c.offered = nil, nil
		closeServers(servers)
	})
}

// closeServers stops servers concurrently and waits for them.
func closeServers(ss []*server) {
	concurrently(len(ss), func(i int) { ss[i].close() })
}

// concurrently runs fn(0) to fn(n-1) at once and waits for them all.
func concurrently(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fn(i) })
	}
	wg.Wait()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
