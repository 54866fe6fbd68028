package servers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/talkide/platform/internal/outpipe"
	"github.com/talkide/platform/internal/sandbox"
)

// stderrTail is how much of a stdio server's stderr is kept to explain
// its failure.
const stderrTail = 2048

// server is one running MCP server of a conversation. Its session ends when
// either side closes it; shutdown then reaps the process and kills what is
// left of its process group.
type server struct {
	cfg   ServerConfig
	cs    *mcp.ClientSession
	proc  *process      // nil for HTTP servers
	grace time.Duration // for a stdio server to exit once its stdin is closed
	done  chan struct{} // closed when the session has ended and everything is released

	// life ends when the server is shut down; calls in flight end with it
	// (a session does not close while a call is outstanding).
	life      context.Context
	stopCalls context.CancelFunc
	once      sync.Once // runs shutdown

	mu      sync.Mutex // guards the fields below
	tools   []*mcp.Tool
	stale   bool   // the server announced a new tool list
	ended   string // why the session ended, once it has
	stopped bool   // close was called: the end was ours
}

// process is a stdio server's process group.
type process struct {
	cmd    *exec.Cmd
	sb     *sandbox.Cmd       // the sandboxed command cmd runs
	cancel context.CancelFunc // kills the group through cmd.Cancel while the leader runs
	stderr *outpipe.Reader    // read end
	tail   *tailBuffer
	read   chan struct{} // closed when stderr is drained
}

// startParams are what startServer needs from the source.
type startParams struct {
	dir       string // the workspace root: cwd and HOME of stdio servers
	path      string // PATH of stdio servers
	grace     time.Duration
	transport http.RoundTripper
	// jail is the conversation's sandbox; a stdio server starts in it or
	// not at all.
	jail *sandbox.Jail
}

// startServer starts sc and lists its tools, within ctx. On error nothing
// is left running.
func startServer(ctx context.Context, sc ServerConfig, p startParams) (*server, error) {
	s := &server{cfg: sc, grace: p.grace, done: make(chan struct{})}
	s.life, s.stopCalls = context.WithCancel(context.Background())
	client := mcp.NewClient(&mcp.Implementation{Name: "talkide", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			s.mu.Lock()
			s.stale = true
			s.mu.Unlock()
		},
	})
	var err error
	switch sc.Type {
	case TypeStdio:
		err = s.connectStdio(ctx, client, p)
	case TypeHTTP:
		err = s.connectHTTP(ctx, client, p)
	default:
		err = fmt.Errorf("unknown type %q", sc.Type)
	}
	if err != nil {
		s.stopCalls()
		return nil, err
	}
	go s.watch()
	ts, err := s.listTools(ctx)
	if err != nil {
		s.close()
		if ended := s.endReason(); ended != "" {
			return nil, errors.New(ended)
		}
		return nil, fmt.Errorf("listing its tools failed: %v", err)
	}
	s.mu.Lock()
	s.tools = ts
	s.mu.Unlock()
	return s, nil
}

func (s *server) connectStdio(ctx context.Context, client *mcp.Client, p startParams) error {
	sc := s.cfg
	path, err := lookCommand(sc.Command, p.path, p.dir)
	if err != nil {
		return err
	}
	env := []string{"PATH=" + p.path, "HOME=" + p.dir, "LANG=C.UTF-8"}
	names := make([]string, 0, len(sc.Env))
	for k := range sc.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		env = append(env, k+"="+sc.Env[k]) // a declared PATH or HOME wins: the last value counts
	}
	if p.jail == nil {
		return errors.New("cannot start: this conversation has no sandbox to run it in")
	}
	x := sandbox.Extra{Env: env, Dir: p.dir}
	if filepath.IsAbs(path) {
		// The operator allow-listed this program: its directory (a
		// toolchain's bin, say) is readable to it, not only the system's.
		x.ReadOnly = []string{filepath.Dir(path)}
	}
	// The process's lifetime is the server's, not the turn's; when it
	// ends the sandbox's supervisor ends the whole tree.
	procCtx, cancel := context.WithCancel(context.Background())
	sb, err := p.jail.ExecCommand(procCtx, path, sc.Args, x)
	if err != nil {
		cancel()
		return fmt.Errorf("cannot start: %v", err)
	}
	pr, pw, err := outpipe.New()
	if err != nil {
		cancel()
		sb.Release()
		return fmt.Errorf("cannot start: %v", err)
	}
	cmd := sb.Cmd
	cmd.Stderr = pw
	proc := &process{cmd: cmd, sb: sb, cancel: cancel, stderr: pr, tail: &tailBuffer{max: stderrTail}, read: make(chan struct{})}

	// A start that takes too long, or a turn interrupted meanwhile, kills
	// the group; Connect then fails at once.
	stop := context.AfterFunc(ctx, cancel)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: s.grace}, nil)
	stop()
	pw.Close() // the server holds the write end now, if it started
	go proc.drain()
	if err != nil {
		proc.end(cs)
		if t := proc.tail.String(); t != "" {
			return fmt.Errorf("failed to start: %v; its stderr ends with: %s", startError(ctx, err), t)
		}
		return fmt.Errorf("failed to start: %v", startError(ctx, err))
	}
	s.cs, s.proc = cs, proc
	return nil
}

func (s *server) connectHTTP(ctx context.Context, client *mcp.Client, p startParams) error {
	hc := &http.Client{
		Transport: &headerTransport{base: p.transport, headers: s.cfg.Headers},
		// A redirect could lead off the allowed prefix.
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("redirects are not followed")
		},
	}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc, MaxRetries: 2}, nil)
	if err != nil {
		return fmt.Errorf("failed to connect: %v", startError(ctx, err))
	}
	s.cs = cs
	return nil
}

// startError says that a start timed out or was interrupted rather than
// what that did to the connection.
func startError(ctx context.Context, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return errors.New("it did not answer in time")
	case ctx.Err() != nil:
		return errors.New("the turn was interrupted")
	}
	return err
}

// listTools returns the server's tools, at most maxTools of them.
func (s *server) listTools(ctx context.Context) ([]*mcp.Tool, error) {
	var out []*mcp.Tool
	for t, err := range s.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, startError(ctx, err)
		}
		out = append(out, t)
		if len(out) > maxToolsPerServer {
			break
		}
	}
	return out, nil
}

// watch waits for the session to end, from either side, and releases it.
func (s *server) watch() {
	err := s.cs.Wait()
	reason := "the server closed the connection"
	if s.proc != nil {
		reason = "the server exited"
	}
	if err != nil && !errors.Is(err, mcp.ErrConnectionClosed) {
		reason += fmt.Sprintf(" (%v)", err)
	}
	s.mu.Lock()
	mine := !s.stopped
	if mine {
		s.ended = reason
	}
	s.mu.Unlock()
	s.shutdown()
	if mine && s.proc != nil {
		if t := s.proc.tail.String(); t != "" {
			s.mu.Lock()
			s.ended = reason + "; its stderr ends with: " + t
			s.mu.Unlock()
		}
	}
	close(s.done)
}

// shutdown ends the session and, for a stdio server, its process group:
// stdin is closed, the server has grace to exit, then the group is killed.
func (s *server) shutdown() {
	s.once.Do(func() {
		s.stopCalls()
		closed := make(chan struct{})
		go func() {
			s.cs.Close()
			close(closed)
		}()
		if s.proc == nil {
			<-closed // bounded by the SDK's timeout on its closing DELETE
			return
		}
		select {
		case <-closed:
		case <-time.After(s.grace):
			s.proc.cancel() // SIGKILL to the group while the leader lives
			<-closed
		}
		s.proc.end(nil)
	})
}

// close ends the server, if it has not ended, and waits until everything
// it held is released.
func (s *server) close() {
	s.mu.Lock()
	if !s.stopped && s.alive() {
		s.ended = "the server was stopped"
	}
	s.stopped = true
	s.mu.Unlock()
	s.shutdown()
	<-s.done
}

// lost marks the session as ended when a call finds the connection gone,
// before watch notices.
func (s *server) lost() {
	s.mu.Lock()
	if s.ended == "" {
		s.ended = "the connection to the server was lost"
	}
	s.mu.Unlock()
	s.stopCalls()
}

// alive reports whether the session is up and not being shut down.
func (s *server) alive() bool {
	return s.life.Err() == nil
}

func (s *server) endReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// end kills what is left of the process group and waits (boundedly) for
// stderr to be drained. cs, when not nil, is a session to close first.
func (p *process) end(cs *mcp.ClientSession) {
	p.cancel()
	if cs != nil {
		cs.Close()
	}
	if p.cmd.Process != nil {
		// The sandbox's supervisor ends the whole tree; its session goes
		// too, should it not have.
		p.sb.Stop()
		pgid := p.cmd.Process.Pid
		// Never Wait here: once Connect has started the process, the SDK's
		// connection reaps it when it closes (on Close, on a failed
		// handshake, or when its reader sees the pipe end after the kill),
		// and a second Wait would race with it.
		syscall.Kill(-pgid, syscall.SIGKILL)
		waitGroupGone(pgid, killWait)
	}
	p.sb.Release()
	p.stderr.Finish(p.read)
}

// killWait bounds the wait for a killed process group to disappear.
const killWait = 2 * time.Second

// waitGroupGone waits, up to limit, until process group pgid has no member
// left that is not a zombie.
func waitGroupGone(pgid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for groupAlive(pgid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// groupAlive reports whether process group pgid has a member that is not a
// zombie. kill(2) counts zombies, and the orphans of a killed group may
// stay zombies under an init that does not reap them, so on Linux the
// members are looked up in /proc; elsewhere kill(2) decides.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid pgrp ...": comm may hold anything, so
		// parse from the last ")".
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// drain keeps the tail of the server's stderr until it is closed.
func (p *process) drain() {
	defer close(p.read)
	defer p.stderr.Close()
	buf := make([]byte, 4096)
	for {
		n, err := p.stderr.Read(buf)
		p.tail.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// lookCommand resolves a command the way a shell with PATH=path would:
// a name with a "/" is used as is (relative to dir), a bare name is looked
// up in path — never in the worker's own PATH.
func lookCommand(command, path, dir string) (string, error) {
	if strings.Contains(command, "/") {
		p := command
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("command %q: %v", command, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, command)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found in PATH %s", command, path)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return errors.New("not found")
	case !fi.Mode().IsRegular():
		return errors.New("not a regular file")
	case fi.Mode().Perm()&0o111 == 0:
		return errors.New("not executable")
	}
	return nil
}

// headerTransport adds a server's declared headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			req.Header.Set(k, v)
		}
	}
	return t.base.RoundTrip(req)
}

// tailBuffer keeps the last max bytes written to it. It is safe for
// concurrent use.
type tailBuffer struct {
	max int

	mu  sync.Mutex // guards buf
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

// String returns the tail as one line of valid UTF-8.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	s := string(b.buf)
	b.mu.Unlock()
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	const show = 500
	if len(s) > show {
		i := len(s) - show
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		s = "…" + s[i:]
	}
	return s
}
