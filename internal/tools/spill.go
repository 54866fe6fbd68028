package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/talkide/platform/internal/atomicfile"
)

// SpillDir is the directory below Call.StateDir where an output too large
// for the model is kept whole, as SpillDir/<call id>.txt.
const SpillDir = "tool-output"

// MaxSpillBytes bounds what is kept of one output on the session volume; a
// runaway command keeps its first MaxSpillBytes, and the note says so.
const MaxSpillBytes = 64 << 20

// spill keeps a call's complete output on the session volume when the
// output turns out larger than what the model is given. A tool writes its
// whole output to it as it produces it, then calls finish. Up to limit
// bytes are buffered in memory; only beyond that is a temporary file
// created, so small outputs never touch the disk. A nil *spill (the call
// has no StateDir or no usable id) keeps nothing. It is safe for
// concurrent use.
type spill struct {
	dir   string // StateDir/SpillDir
	name  string // <id>.txt
	limit int    // bytes buffered before a file is created
	max   int64  // bytes kept at most: MaxSpillBytes

	mu    sync.Mutex       // guards the fields below
	buf   []byte           // the output while it fits limit
	f     *atomicfile.File // the temporary file beyond it
	kept  int64            // bytes written to f, at most max
	total int64            // bytes written to the spill
	err   error            // the first failure; nothing is kept then
	done  bool             // finish was called
}

// newSpill returns the spill for call, or nil when the call has no
// StateDir or its id makes no file name. limit is how much to buffer in
// memory before writing to a file: the tool's output cap, since below it
// the output is not cut and nothing is kept.
func newSpill(call Call, limit int) *spill {
	name := spillName(call.ID)
	if call.StateDir == "" || name == "" {
		return nil
	}
	return &spill{dir: filepath.Join(call.StateDir, SpillDir), name: name, limit: limit, max: MaxSpillBytes}
}

// spillName maps a tool_use id to a file name: letters, digits, "-" and
// "_" are kept, anything else becomes "_". An empty id has no name.
func spillName(id string) string {
	if id == "" || len(id) > 200 {
		return ""
	}
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b) + ".txt"
}

func (s *spill) Write(p []byte) (int, error) {
	if s == nil {
		return len(p), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return len(p), nil
	}
	s.total += int64(len(p))
	switch {
	case s.err != nil:
	case s.f == nil && len(s.buf)+len(p) <= s.limit:
		s.buf = append(s.buf, p...)
	case s.f == nil:
		if s.open() {
			s.writeFile(p)
		}
	default:
		s.writeFile(p)
	}
	// The spill never fails its writer: a tool's output must not depend on
	// the session volume.
	return len(p), nil
}

func (s *spill) WriteString(str string) (int, error) { return s.Write([]byte(str)) }

// open creates the temporary file and moves the buffer into it, reporting
// whether it succeeded. s.mu is held.
func (s *spill) open() bool {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		s.err = err
		return false
	}
	f, err := atomicfile.Create(filepath.Join(s.dir, s.name), 0o600)
	if err != nil {
		s.err = err
		return false
	}
	s.f = f
	buf := s.buf
	s.buf = nil
	s.writeFile(buf)
	return s.err == nil
}

// writeFile appends p to the file, up to s.max bytes in all. s.mu is held.
func (s *spill) writeFile(p []byte) {
	if room := s.max - s.kept; int64(len(p)) > room {
		p = p[:room]
	}
	if len(p) == 0 || s.err != nil {
		return
	}
	n, err := s.f.Write(p)
	s.kept += int64(n)
	if err != nil {
		s.err = err
	}
}

// finish ends the spill. When the output was cut for the model (cut), it
// moves the complete output into place as SpillDir/<id>.txt (mode 0600,
// atomically) and returns a note for the end of the model's text that says
// so (see appendNote); otherwise it discards what it holds and returns "".
// A nil spill, or one already finished, returns "".
func (s *spill) finish(cut bool) string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return ""
	}
	s.done = true
	if !cut {
		s.discard()
		return ""
	}
	if err := s.keep(); err != nil {
		s.discard()
		return fmt.Sprintf("[the full output (%d bytes) could not be kept on the session volume]", s.total)
	}
	rel := SpillDir + "/" + s.name
	if s.kept < s.total {
		return fmt.Sprintf("[full output (%d bytes) too large to keep whole: its first %d bytes are kept on the session volume as %s]", s.total, s.kept, rel)
	}
	return fmt.Sprintf("[full output (%d bytes) kept on the session volume as %s]", s.total, rel)
}

// keep puts the temporary file in place. The output may still be in the
// buffer (it was cut although it fit: a tool whose notes pushed it over its
// cap). s.mu is held.
func (s *spill) keep() error {
	if s.f == nil && s.err == nil {
		s.open()
	}
	if s.err != nil {
		return s.err
	}
	f := s.f
	s.f = nil
	return f.Commit()
}

// discard drops the buffer and the temporary file. s.mu is held.
func (s *spill) discard() {
	s.buf = nil
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// CapOutput caps text, a tool's complete output, at max bytes the way the
// built-in tools do (head and tail kept, the total noted in the middle), and
// when it had to cut, keeps the whole of text on the session volume (see
// Call.StateDir) and notes it at the end. Tools from elsewhere (MCP servers)
// use it so every tool's output looks the same to the model.
func CapOutput(call Call, text string, max int) string {
	if len(text) <= max {
		return text
	}
	s := newSpill(call, 0)
	s.WriteString(text)
	return appendNote(truncate(text, max), s.finish(true))
}

// appendNote appends note, when not empty, to text on a line of its own.
func appendNote(text, note string) string {
	if note == "" {
		return text
	}
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text + note
}
