package tools

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/outpipe"
	"github.com/talkide/platform/internal/sandbox"
)

// BashInput is the input of Bash.
type BashInput struct {
	Command     string `json:"command"`
	Timeout     int    `json:"timeout,omitempty"` // milliseconds; 0 means the tool's default
	Description string `json:"description,omitempty"`
}

const bashDescriptionFormat = `Runs a bash command in the workspace directory and returns its combined stdout and stderr.

- The working directory is the workspace root at the start of every call; state such as cd or shell variables does not carry over between calls.
- Quote paths that contain spaces. Prefer the Read, Edit, Write, Glob and Grep tools over cat, sed, echo >, find and grep.
- timeout is in milliseconds (default %d, max 600000). On timeout the command and all its child processes are killed.
- Background processes (cmd &) do not outlive the call: when bash exits, what it left running is killed. There is no interactive input (stdin is empty).
- Output beyond %d bytes is cut in the middle; a non-zero exit status is reported as an error.
- Chain dependent commands with && and run independent ones in separate calls.`

// Bash runs a command with /bin/bash in the workspace root. The zero value
// uses the defaults of Options.
type Bash struct {
	Timeout        time.Duration // default for calls without a timeout; 0 means 2 minutes
	MaxOutputBytes int           // 0 means DefaultMaxOutputBytes
	Env            []string      // complete environment; nil means a minimal one (see Options.Env)
}

// killGrace is how long a process group has to exit after SIGTERM before
// it gets SIGKILL.
const killGrace = time.Second

const bashShell = "/bin/bash"

func (*Bash) Name() string { return "Bash" }

// Description reflects the configured default timeout and output cap.
func (b *Bash) Description() string {
	return fmt.Sprintf(bashDescriptionFormat, b.timeout().Milliseconds(), b.maxOutput())
}

func (b *Bash) timeout() time.Duration {
	if b.Timeout <= 0 {
		return DefaultBashTimeout
	}
	return min(b.Timeout, MaxBashTimeout)
}

func (b *Bash) maxOutput() int { return outputCap(b.MaxOutputBytes) }

func (*Bash) InputSchema() map[string]any {
	return objectSchema(map[string]any{
		"command":     property("string", "The command to execute"),
		"timeout":     property("number", "Optional timeout in milliseconds (max 600000)"),
		"description": property("string", "Clear, concise description of what this command does in 5-10 words"),
	}, "command")
}

func (b *Bash) Run(ctx context.Context, call Call) (Result, error) {
	var in BashInput
	if res, done, err := begin(ctx, call, &in, "command"); done {
		return res, err
	}
	if in.Command == "" {
		return errorResult("invalid input: field \"command\" must not be empty"), nil
	}
	timeout := b.timeout()
	switch {
	case in.Timeout < 0:
		return errorResult("invalid input: field \"timeout\" must not be negative, got %d", in.Timeout), nil
	case in.Timeout > int(MaxBashTimeout/time.Millisecond):
		return errorResult("invalid input: field \"timeout\" must be at most %d (milliseconds), got %d", MaxBashTimeout/time.Millisecond, in.Timeout), nil
	case in.Timeout > 0:
		timeout = time.Duration(in.Timeout) * time.Millisecond
	}
	maxOut := b.maxOutput()

	if call.Jail == nil {
		return errorResult("Bash cannot run: this conversation has no sandbox to run commands in"), nil
	}
	var extra sandbox.Extra
	if b.Env != nil {
		extra.Env = b.Env
	}
	// The supervisor ends the command at the timeout; the timer below is
	// a backstop should the supervisor itself not end.
	extra.Timeout = timeout

	pr, pw, err := outpipe.New()
	if err != nil {
		return Result{}, fmt.Errorf("bash: %w", err)
	}
	defer pr.Close()
	cmd, err := call.Jail.Command(bashShell, []string{"-c", in.Command}, extra)
	if err != nil {
		pw.Close()
		return errorResult("Bash cannot run: %v", err), nil
	}
	cmd.Stdout = pw
	cmd.Stderr = pw
	// The command's span, from its start to its end, and its start's
	// within it: what the sandbox cost apart from what the command did.
	// Neither holds the command line.
	cctx, cspan := observe.Start(ctx, observe.FromContext(ctx, "tools"), "sandbox command")
	defer cspan.End()
	_, sspan := observe.Start(cctx, observe.FromContext(cctx, "sandbox"), "sandbox start")
	if err := cmd.Start(); err != nil {
		observe.End(sspan, err, "start_failed")
		observe.End(cspan, err, "start_failed")
		pw.Close()
		return errorResult("Bash cannot run: %v", err), nil
	}
	if sspan.IsRecording() {
		sspan.SetAttributes(attribute.Bool("talkide.sandbox.warm", cmd.Warm()))
	}
	sspan.End()
	pw.Close() // the children hold the write end now

	full := newSpill(call, maxOut)
	out := newHeadTail(maxOut)
	out.tee = full
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		copyOutput(pr, out, call.Output)
	}()
	type ended struct {
		o   sandbox.Outcome
		err error
	}
	exited := make(chan ended, 1)
	go func() {
		o, err := cmd.Wait()
		exited <- ended{o, err}
	}()

	backstop := time.NewTimer(timeout + killGrace + outpipe.Grace)
	defer backstop.Stop()
	var end ended
	var ctxErr error
	select {
	case end = <-exited:
	case <-backstop.C:
		cmd.Stop()
		end = <-exited
		end.o.Ending = sandbox.EndTimeout
	case <-ctx.Done():
		ctxErr = ctx.Err()
		cmd.Stop()
		end = <-exited
	}

	pr.Finish(readDone)

	if cspan.IsRecording() {
		cspan.SetAttributes(attribute.String("talkide.sandbox.ending", string(end.o.Ending)),
			attribute.Int("process.exit.code", end.o.ExitCode))
	}
	text := out.String()
	if ctxErr != nil {
		full.finish(false)
		return Result{Output: text, IsError: true}, ctxErr
	}
	var note string
	isErr := end.err != nil
	switch o := end.o; {
	case o.Ending == sandbox.EndTimeout:
		note = fmt.Sprintf("Command timed out after %v; it and its child processes were killed.", timeout)
	case o.Ending == sandbox.EndProcs:
		note = "Command killed: it ran more processes at once than the sandbox allows; it and its child processes were killed."
	case o.Ending == sandbox.EndMemory:
		note = "Command killed: its processes used more memory than the sandbox allows; they were all killed."
	case o.Signal == syscall.SIGXFSZ:
		note = "terminated by signal SIGXFSZ: a file grew past the sandbox's file size limit"
	case o.Signal != 0:
		note = fmt.Sprintf("terminated by signal %v", o.Signal)
	case o.ExitCode != 0:
		note = fmt.Sprintf("exit status %d", o.ExitCode)
	}
	switch {
	case note == "" && text == "":
		text = "(no output)"
	case note != "" && text == "":
		text = note
	case note != "":
		if text[len(text)-1] != '\n' {
			text += "\n"
		}
		text += note
	}
	text = appendNote(text, full.finish(out.cut()))
	return Result{Output: text, IsError: isErr}, nil
}

// copyOutput reads r until EOF or error, keeping what it reads in out and
// passing it to stream, if non-nil, in chunks that end on rune boundaries.
func copyOutput(r io.Reader, out *headTail, stream func(string)) {
	buf := make([]byte, 32<<10)
	var carry []byte // an incomplete rune from the previous read
	for {
		n, err := r.Read(buf[len(carry):])
		if n > 0 {
			chunk := buf[:len(carry)+n]
			out.Write(chunk[len(carry):])
			cut := completeRunes(chunk)
			if stream != nil && cut > 0 {
				stream(string(chunk[:cut]))
			}
			carry = append(carry[:0], chunk[cut:]...)
			copy(buf, carry)
		}
		if err != nil {
			if stream != nil && len(carry) > 0 {
				stream(string(carry))
			}
			return
		}
	}
}

// completeRunes returns the length of the longest prefix of b that does not
// end in the middle of a UTF-8 sequence (invalid bytes count as complete).
func completeRunes(b []byte) int {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return len(b)
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-i:]) {
				return len(b)
			}
			return len(b) - i
		}
	}
	return len(b)
}

// headTail keeps the first and last bytes written to it, up to a total of
// max, and counts everything. It is safe for concurrent use.
type headTail struct {
	tee io.Writer // when not nil, receives everything written, in order; set before the first Write

	mu    sync.Mutex // guards the fields below
	max   int
	head  []byte // up to max/2 bytes
	tail  []byte // ring buffer of up to max-max/2 bytes
	start int    // index of the oldest byte in tail once it is full
	total int
}

func newHeadTail(max int) *headTail {
	return &headTail{max: max}
}

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	h.total += n
	if h.tee != nil {
		h.tee.Write(p)
	}
	if room := h.max/2 - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	tailMax := h.max - h.max/2
	for len(p) > 0 {
		if len(h.tail) < tailMax {
			k := min(tailMax-len(h.tail), len(p))
			h.tail = append(h.tail, p[:k]...)
			p = p[k:]
			continue
		}
		if len(p) >= tailMax {
			copy(h.tail, p[len(p)-tailMax:])
			h.start = 0
			break
		}
		k := copy(h.tail[h.start:], p)
		p = p[k:]
		h.start = (h.start + k) % tailMax
	}
	return n, nil
}

// cut reports whether more than max bytes were written, so that String
// cuts them.
func (h *headTail) cut() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total > h.max
}

// String returns what was written, cut in the middle with a note when it
// exceeded max.
func (h *headTail) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	tail := append(append([]byte{}, h.tail[h.start:]...), h.tail[:h.start]...)
	if h.total <= h.max {
		return string(h.head) + string(tail)
	}
	note := truncateNote(h.total)
	// Give the note room, taking it from both ends.
	cut := len(note) / 2
	head := h.head[:max(0, len(h.head)-cut)]
	tail = tail[min(len(tail), len(note)-cut):]
	return headUTF8(string(head)) + note + tailUTF8(string(tail))
}
