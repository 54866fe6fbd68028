package build

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/talkide/platform/internal/backoff"
)

// LogSource is one container's log, as the API server serves it
// (pods/log): every line starts with its RFC 3339 timestamp and a space.
// A follow stream ends when the kubelet rotates the log file or the
// connection breaks, not only when the container ends. Methods may be
// called from one goroutine at a time.
type LogSource interface {
	// Open returns the log from since on (the zero time: from the start;
	// the server rounds since down to the second), following new lines
	// when follow is set.
	Open(ctx context.Context, since time.Time, follow bool) (io.ReadCloser, error)
	// Ended reports whether the container has ended: no line will follow.
	Ended(ctx context.Context) (bool, error)
}

// maxLogLine bounds one line kept in memory; the rest of a longer line is
// dropped with a note.
const maxLogLine = 256 << 10

// maxFinalTries bounds the attempts at the last read of an ended
// container's log.
const maxFinalTries = 3

// logRetry paces reconnections of a broken log stream.
var logRetry = backoff.Policy{Base: 200 * time.Millisecond, Max: 5 * time.Second}

// FollowLog copies src's lines, without their timestamps, to out until the
// container has ended and its log has been read to the end, or ctx ends.
// A stream that ends early is reopened from the last line's second
// (sinceTime) and the lines already copied are dropped, by timestamp and
// by count within the same timestamp, so that no line is lost or doubled;
// once the container has ended, one last read without follow picks up what
// a broken stream missed. A line cut off by a broken stream is not copied
// until it comes again whole.
func FollowLog(ctx context.Context, src LogSource, out io.Writer) error {
	var d dedupe
	retry := backoff.New(logRetry)
	finalTries := 0
	for {
		ended, err := src.Ended(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if retry.Wait(ctx) != nil {
				return ctx.Err()
			}
			continue
		}
		rc, err := src.Open(ctx, d.last, !ended)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if ended {
				// The last read: a few more tries, then the container is
				// taken to be gone with its log (a deleted pod).
				if finalTries++; finalTries >= maxFinalTries {
					return err
				}
			}
			if retry.Wait(ctx) != nil {
				return ctx.Err()
			}
			continue
		}
		progress := d.copy(rc, out, ended)
		rc.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ended {
			return nil
		}
		if progress {
			retry.Reset()
		} else if retry.Wait(ctx) != nil {
			return ctx.Err()
		}
	}
}

// dedupe remembers where the copied log stands.
type dedupe struct {
	last   time.Time // the timestamp of the last line copied
	atLast int       // lines copied with that timestamp
	has    bool      // a line has been copied
}

// copy reads one stream. Lines at or before what was copied are dropped:
// a reopened stream starts at the second of the last line, so it repeats
// the lines of that second already copied. final copies a last line
// without a newline too. It reports whether any line was copied.
func (d *dedupe) copy(r io.Reader, out io.Writer, final bool) bool {
	br := bufio.NewReaderSize(r, 32<<10)
	skip := d.atLast // lines of d.last this stream repeats
	copied := false
	for {
		line, complete, err := readLine(br)
		if len(line) > 0 && (complete || final) {
			ts, text, ok := splitTimestamp(line)
			switch {
			case !ok:
				// No timestamp to place it by: copy it as it is.
				out.Write(text)
				copied = true
			case d.has && ts.Before(d.last):
			case d.has && ts.Equal(d.last) && skip > 0:
				skip--
			default:
				if !d.has || !ts.Equal(d.last) {
					d.last, d.atLast, d.has, skip = ts, 0, true, 0
				}
				d.atLast++
				out.Write(text)
				copied = true
			}
		}
		if err != nil {
			return copied
		}
	}
}

// readLine returns the next line with its newline, cut to maxLogLine
// (with a note), and whether it ended with a newline.
func readLine(br *bufio.Reader) ([]byte, bool, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) <= maxLogLine {
			line = append(line, chunk...)
		} else if len(line) < maxLogLine {
			line = append(line, chunk[:maxLogLine-len(line)]...)
		}
		switch {
		case err == nil:
			if len(line) >= maxLogLine && !bytes.HasSuffix(line, []byte("\n")) {
				line = append(line, " [line cut]\n"...)
			}
			return line, true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return line, false, err
		}
	}
}

// splitTimestamp splits "2006-01-02T15:04:05.999999999Z text\n".
func splitTimestamp(line []byte) (time.Time, []byte, bool) {
	i := bytes.IndexByte(line, ' ')
	if i <= 0 || i > 40 {
		return time.Time{}, line, false
	}
	ts, err := time.Parse(time.RFC3339Nano, string(line[:i]))
	if err != nil {
		return time.Time{}, line, false
	}
	return ts, line[i+1:], true
}
