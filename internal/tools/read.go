package tools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"unicode/utf8"
)

// ReadInput is the input of Read.
type ReadInput struct {
	FilePath string `json:"file_path"`
	Offset   int    `json:"offset,omitempty"` // 1-based line to start at; 0 means 1
	Limit    int    `json:"limit,omitempty"`  // lines; 0 means DefaultReadLimit
}

// Read limits.
const (
	DefaultReadLimit = 2000 // lines per call
	MaxLineChars     = 2000 // characters kept of a line
	binarySniffBytes = 8 << 10
)

const readDescription = `Reads a text file from the workspace.

- file_path is relative to the workspace root, or absolute inside it.
- By default reads up to 2000 lines from the start. For long files, pass offset (1-based line number to start at) and limit (number of lines).
- Output is in cat -n format: the line number, a tab, then the line. Lines longer than 2000 characters are cut. The line-number prefix is not part of the file.
- Binary files are refused, and so are directories: use LS, or Glob, to list a directory.
- Read a file before editing it, and read several files in parallel when you need them.`

// Read reads a text file. The zero value uses the defaults of Options.
type Read struct {
	MaxOutputBytes int // 0 means DefaultMaxOutputBytes
}

func (*Read) Name() string        { return "Read" }
func (*Read) Description() string { return readDescription }

func (*Read) InputSchema() map[string]any {
	return objectSchema(map[string]any{
		"file_path": property("string", "The path of the file to read, relative to the workspace root or absolute inside it"),
		"offset":    property("number", "The line number to start reading from (1-based). Only provide if the file is too large to read at once"),
		"limit":     property("number", "The number of lines to read (default 2000). Only provide if the file is too large to read at once"),
	}, "file_path")
}

func (r *Read) Run(ctx context.Context, call Call) (Result, error) {
	var in ReadInput
	if res, done, err := begin(ctx, call, &in, "file_path"); done {
		return res, err
	}
	if err := nonNegative("offset", in.Offset); err != nil {
		return errorResult("%v", err), nil
	}
	if err := nonNegative("limit", in.Limit); err != nil {
		return errorResult("%v", err), nil
	}
	offset := max(in.Offset, 1)
	limit := in.Limit
	if limit == 0 {
		limit = DefaultReadLimit
	}
	maxOut := outputCap(r.MaxOutputBytes)
	// full receives what Read would show without the byte cap, to keep it
	// whole when the cap cuts it.
	full := newSpill(call, maxOut)
	defer full.finish(false)

	ws := call.Workspace
	path, err := ws.Resolve(in.FilePath)
	if err != nil {
		return errorResult("Cannot read %v", err), nil
	}
	rel := ws.Rel(path)
	f, err := openForRead(ws, path, rel)
	if err != nil {
		return errorResult("%v", err), nil
	}
	defer f.Close()

	br := bufio.NewReaderSize(f, 64<<10)
	sniff, _ := br.Peek(binarySniffBytes)
	if len(sniff) == 0 {
		return Result{Output: fmt.Sprintf("(%s exists but is empty)", rel)}, nil
	}
	if bytes.IndexByte(sniff, 0) >= 0 {
		return errorResult("Cannot read %s: it is a binary file; Read only shows text files", rel), nil
	}

	var b strings.Builder
	n := 0       // lines read so far
	shown := 0   // lines written to b
	inRange := 0 // lines from offset on, up to limit: shown, or cut by the byte cap
	stopped := 0 // line at which the byte cap stopped output, or 0
	for {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		line, ok, err := readLine(br, MaxLineChars)
		if err != nil {
			return errorResult("Cannot read %s: %v", rel, err), nil
		}
		if !ok {
			break
		}
		n++
		if n < offset || inRange >= limit || stopped > 0 && full == nil {
			continue // keep counting lines for the summary
		}
		inRange++
		entry := fmt.Sprintf("%6d\t%s\n", n, line)
		full.WriteString(entry)
		if stopped > 0 {
			continue
		}
		if b.Len()+len(entry) > maxOut && shown > 0 {
			stopped = n
			continue
		}
		b.WriteString(entry)
		shown++
	}
	if offset > n {
		return errorResult("%s has %s; offset %d is past its end", rel, plural(n, "line"), offset), nil
	}
	last := offset + shown - 1
	switch {
	case stopped > 0:
		fmt.Fprintf(&b, "\n[output truncated to %d bytes: showed lines %d-%d of %d; continue with offset=%d]\n", maxOut, offset, last, n, stopped)
		if end := offset + inRange - 1; end < n {
			fmt.Fprintf(full, "\n[showed lines %d-%d of %d; continue with offset=%d]\n", offset, end, n, end+1)
		}
		return Result{Output: appendNote(b.String(), full.finish(true))}, nil
	case last < n:
		fmt.Fprintf(&b, "\n[showed lines %d-%d of %d; continue with offset=%d]\n", offset, last, n, last+1)
	}
	return Result{Output: b.String()}, nil
}

// openForRead opens path, from Resolve, for reading through the workspace,
// refusing what is not a regular file with one hard link with a message for
// the model.
func openForRead(ws *Workspace, path, rel string) (*os.File, error) {
	f, _, err := ws.openRegular(path)
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, ErrOutsideWorkspace):
		return nil, fmt.Errorf("Cannot read %v", err)
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("File does not exist: %s", rel)
	case errors.Is(err, ErrIsDir):
		return nil, fmt.Errorf("%s is a directory, not a file; use LS (or Glob) to list its contents", rel)
	default:
		return nil, fmt.Errorf("Cannot read %s: %v", rel, err)
	}
}

// readLine reads one line without its line ending, keeping at most
// maxChars characters of it (and noting the cut). ok is false at EOF.
func readLine(br *bufio.Reader, maxChars int) (line string, ok bool, err error) {
	var buf []byte
	chars := 0
	cut := false
	for {
		frag, err := br.ReadSlice('\n')
		if len(frag) > 0 {
			ok = true
		}
		if !cut {
			body := frag
			if err == nil {
				body = bytes.TrimSuffix(bytes.TrimSuffix(body, []byte("\n")), []byte("\r"))
			}
			for len(body) > 0 {
				if chars == maxChars {
					cut = true
					break
				}
				_, size := utf8.DecodeRune(body)
				buf = append(buf, body[:size]...)
				body = body[size:]
				chars++
			}
		}
		switch {
		case err == nil:
			return finishLine(buf, cut), true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return finishLine(buf, cut), ok, nil
		default:
			return "", false, err
		}
	}
}

func finishLine(buf []byte, cut bool) string {
	// A CR before a buffer-full boundary is left in place; only a CRLF at
	// the very end is a line ending.
	if cut {
		return string(buf) + " [… line truncated]"
	}
	return string(buf)
}
