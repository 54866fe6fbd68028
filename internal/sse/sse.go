// Package sse reads and writes Server-Sent Events (the text/event-stream
// format of the HTML standard), as spoken between browser, control-plane,
// worker, gateway and model.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Event is one dispatched event. Comments (heartbeats) are not events.
type Event struct {
	ID    string // empty when the event had no id field
	Event string // empty means "message"
	Data  []byte
}

// ErrLineTooLong is returned when a line exceeds the reader's limit.
var ErrLineTooLong = errors.New("sse: line too long")

// ErrEventTooLarge is returned when one event's data (all its data lines)
// exceeds four times the line limit.
var ErrEventTooLarge = errors.New("sse: event too large")

func (r *Reader) maxEvent() int { return 4 * r.maxLine }

// Reader parses an event stream. Lines end in LF or CRLF; a bare CR is kept
// as data (none of our peers sends one).
type Reader struct {
	br      *bufio.Reader
	maxLine int
	line    []byte
}

// NewReader returns a reader that refuses lines longer than maxLine bytes.
func NewReader(r io.Reader, maxLine int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 4096), maxLine: maxLine}
}

// Next returns the next event. At the end of the stream it returns io.EOF; an
// event not terminated by a blank line before the end is discarded, as the
// standard says.
func (r *Reader) Next() (Event, error) {
	var ev Event
	var data bytes.Buffer
	hasData, hasAny := false, false
	for {
		line, err := r.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return Event{}, io.EOF
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if !hasAny {
				continue
			}
			if hasData {
				ev.Data = bytes.Clone(data.Bytes())
				return ev, nil
			}
			// An event with no data is not dispatched; its fields are reset.
			ev, hasAny = Event{}, false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		hasAny = true
		switch string(field) {
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
			if data.Len() > r.maxEvent() {
				return Event{}, ErrEventTooLarge
			}
		case "event":
			ev.Event = string(value)
		case "id":
			if !bytes.ContainsRune(value, 0) {
				ev.ID = string(value)
			}
		}
	}
}

func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.line = append(r.line, chunk...)
		if len(r.line) > r.maxLine+2 {
			return nil, ErrLineTooLong
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(r.line) > 0 {
			// A final line without a newline cannot complete an event.
			return nil, io.EOF
		}
		return nil, err
	}
	line := r.line[:len(r.line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// Write writes one event. id and event must not contain line breaks; data may,
// and is split into several data lines.
func Write(w io.Writer, id, event string, data []byte) error {
	if strings.ContainsAny(id, "\r\n") || strings.ContainsAny(event, "\r\n") {
		return fmt.Errorf("sse: id or event name contains a line break")
	}
	var b bytes.Buffer
	b.Grow(len(data) + len(id) + len(event) + 24)
	if id != "" {
		b.WriteString("id: ")
		b.WriteString(id)
		b.WriteByte('\n')
	}
	if event != "" {
		b.WriteString("event: ")
		b.WriteString(event)
		b.WriteByte('\n')
	}
	for {
		i := bytes.IndexAny(data, "\r\n")
		b.WriteString("data: ")
		if i < 0 {
			b.Write(data)
			b.WriteByte('\n')
			break
		}
		b.Write(data[:i])
		b.WriteByte('\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// WriteComment writes a comment line, used as a heartbeat.
func WriteComment(w io.Writer, text string) error {
	_, err := io.WriteString(w, ": "+strings.NewReplacer("\r", " ", "\n", " ").Replace(text)+"\n\n")
	return err
}

// Begin starts an event-stream response: it sets the headers that keep
// proxies from buffering or caching it, writes the 200, and flushes, so the
// client knows at once that the stream is open.
func Begin(w http.ResponseWriter) (http.Flusher, error) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return nil, errors.New("sse: the response writer cannot flush")
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	return flusher, nil
}
