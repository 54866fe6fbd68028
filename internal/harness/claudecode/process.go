package claudecode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/talkide/platform/internal/proctree"
	"github.com/talkide/platform/internal/sandbox"
)

// proc is one running CLI process: the conversation's long-lived session.
type proc struct {
	cmd       *exec.Cmd
	sb        *sandbox.Cmd // the sandboxed command cmd runs
	stdin     io.WriteCloser
	resumed   bool          // started with --resume
	lines     chan []byte   // stdout lines; closed when stdout ends
	quit      chan struct{} // closed by stop: the reader stops delivering
	exited    chan struct{} // closed once the process was waited for
	stderr    *tailBuffer   // the end of the CLI's stderr, for logs
	waitErr   error         // set before exited is closed
	stopOnce  sync.Once
	idleTimer *time.Timer // guarded by Harness.mu
	busy      bool        // guarded by Harness.mu: a turn is using the process
}

// errLineTooLong marks a stdout line longer than the limit; it was dropped.
var errLineTooLong = errors.New("line too long")

// tooLongLine is what the reader delivers in place of a dropped line.
var tooLongLine = []byte{0}

// startProc starts the CLI in dir with env, in jail.
func startProc(jail *sandbox.Jail, bin string, args []string, x sandbox.Extra, maxLine int) (*proc, error) {
	if jail == nil {
		return nil, errors.New("this conversation has no sandbox to run Claude Code in")
	}
	sb, err := jail.ExecCommand(context.Background(), bin, args, x)
	if err != nil {
		return nil, err
	}
	cmd := sb.Cmd
	// The sandbox's supervisor ends the CLI's tree when it exits or is
	// stopped. WaitDelay bounds Wait should something still hold stderr.
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	tail := &tailBuffer{max: 8 << 10}
	cmd.Stderr = tail
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{
		cmd: cmd, sb: sb, stdin: stdin, stderr: tail,
		lines:  make(chan []byte, 64),
		quit:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go func() {
		defer close(p.exited)
		p.read(stdout, maxLine)
		p.waitErr = cmd.Wait()
		sb.Release()
	}()
	return p, nil
}

// read delivers stdout lines until EOF or stop.
func (p *proc) read(r io.Reader, maxLine int) {
	defer close(p.lines)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br, maxLine)
		if errors.Is(err, errLineTooLong) {
			line, err = tooLongLine, nil
		}
		if len(line) > 0 {
			select {
			case p.lines <- line:
			case <-p.quit:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one '\n'-terminated line without the newline. A line over
// max bytes is consumed and dropped: errLineTooLong.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > max+1 {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			if err == nil {
				return nil, errLineTooLong
			}
			return nil, err
		}
		return bytes.TrimRight(buf, "\r\n"), err
	}
}

// send writes one line to the CLI's stdin, giving up when ctx ends or the
// process exits.
func (p *proc) send(ctx context.Context, line []byte) error {
	done := make(chan error, 1)
	go func() {
		_, err := p.stdin.Write(line)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		p.stop()
		<-done
		return ctx.Err()
	case <-p.exited:
		p.stop() // closes stdin, which ends the write
		<-done
		return errors.New("the process exited")
	}
}

// stop kills the CLI and everything it started, and waits until the
// process is reaped. Safe to call more than once and concurrently.
func (p *proc) stop() {
	p.stopOnce.Do(func() {
		close(p.quit)
		p.sb.Stop()
		killTree(p.cmd.Process.Pid)
		p.stdin.Close()
	})
	<-p.exited
}

// killTree kills pid's process group and every descendant of pid, with the
// groups they lead: the CLI starts each Bash command in a session of its
// own, which killing its group alone would leave running. The tree is
// stopped first so that nothing forks past the walk.
func killTree(pid int) {
	var all []int
	seen := map[int]bool{}
	for round := 0; round < 3; round++ {
		found := false
		for _, d := range append([]int{pid}, proctree.Descendants(pid)...) {
			if !seen[d] {
				seen[d] = true
				all = append(all, d)
				found = true
			}
			syscall.Kill(d, syscall.SIGSTOP)
		}
		if !found {
			break
		}
	}
	self := syscall.Getpgrp()
	for _, d := range all {
		if pg, err := syscall.Getpgid(d); err == nil && pg != self && pg > 1 {
			syscall.Kill(-pg, syscall.SIGKILL)
		}
		syscall.Kill(d, syscall.SIGKILL)
	}
	syscall.Kill(-pid, syscall.SIGKILL)
}

// exitDetail describes how the process ended, for logs.
func (p *proc) exitDetail() string {
	tail := strings.TrimSpace(p.stderr.String())
	if tail == "" {
		return fmt.Sprintf("%v", p.waitErr)
	}
	return fmt.Sprintf("%v; stderr: %s", p.waitErr, tail)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte // guarded by mu
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
