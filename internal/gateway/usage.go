package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
)

// Limits of what the meter holds while a response passes.
const (
	maxJSONCapture = 4 << 20 // a JSON body longer than this yields no usage
	maxSSELine     = 1 << 20 // a longer SSE line is skipped
	maxSSEData     = 1 << 20 // a longer message_start/message_delta is skipped
)

// usage is what a response says a call consumed.
type usage struct {
	Model                    string
	InputTokens              int64
	OutputTokens             int64
	CacheCreationInputTokens int64
	CacheReadInputTokens     int64
}

// wireUsage is Anthropic's usage object. Pointers tell absent from zero.
type wireUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// set copies every field present in w (message_start, a JSON body).
func (u *usage) set(w *wireUsage) {
	if w == nil {
		return
	}
	setIf(&u.InputTokens, w.InputTokens, false)
	setIf(&u.OutputTokens, w.OutputTokens, false)
	setIf(&u.CacheCreationInputTokens, w.CacheCreationInputTokens, false)
	setIf(&u.CacheReadInputTokens, w.CacheReadInputTokens, false)
}

// update applies a message_delta: output_tokens is cumulative, so the last
// one wins; the input and cache counts replace earlier ones only when
// non-zero.
func (u *usage) update(w *wireUsage) {
	if w == nil {
		return
	}
	setIf(&u.OutputTokens, w.OutputTokens, false)
	setIf(&u.InputTokens, w.InputTokens, true)
	setIf(&u.CacheCreationInputTokens, w.CacheCreationInputTokens, true)
	setIf(&u.CacheReadInputTokens, w.CacheReadInputTokens, true)
}

// setIf stores *v in dst when v is present (and non-zero, if nonZero). A
// negative count is stored as zero: usage is never negative.
func setIf(dst *int64, v *int64, nonZero bool) {
	if v == nil || nonZero && *v == 0 {
		return
	}
	*dst = max(*v, 0)
}

// sseUsage reads usage from an Anthropic event stream, incrementally, as the
// stream's bytes are written to it. It copies only the current line and the
// data of message_start and message_delta events; it never fails. It is not
// safe for concurrent use.
type sseUsage struct {
	u usage

	line     []byte // the current line, when it spans writes
	overflow bool   // the current line passed maxSSELine and is skipped

	event   string // event field of the current event
	data    []byte // data of the current event, when wanted
	hasData bool
	skip    bool // the current event's data passed maxSSEData
}

// Write consumes the next bytes of the stream.
func (p *sseUsage) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.appendLine(b)
			break
		}
		seg := b[:i]
		b = b[i+1:]
		line := seg
		if len(p.line) > 0 || p.overflow {
			p.appendLine(seg)
			line = p.line
		}
		if !p.overflow {
			p.processLine(bytes.TrimSuffix(line, []byte("\r")))
		}
		p.line, p.overflow = p.line[:0], false
	}
	return n, nil
}

func (p *sseUsage) appendLine(b []byte) {
	if p.overflow {
		return
	}
	if len(p.line)+len(b) > maxSSELine {
		p.line, p.overflow = p.line[:0], true
		return
	}
	p.line = append(p.line, b...)
}

func (p *sseUsage) processLine(line []byte) {
	if len(line) == 0 {
		if p.hasData && !p.skip {
			p.dispatch()
		}
		p.event, p.data, p.hasData, p.skip = "", p.data[:0], false, false
		return
	}
	if line[0] == ':' {
		return
	}
	field, value, found := bytes.Cut(line, []byte(":"))
	if found && len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch string(field) {
	case "event":
		p.event = string(value)
	case "data":
		more := p.hasData
		p.hasData = true
		if !p.wanted() || p.skip {
			return
		}
		need := len(value)
		if more {
			need++
		}
		if len(p.data)+need > maxSSEData {
			p.data, p.skip = p.data[:0], true
			return
		}
		if more {
			p.data = append(p.data, '\n')
		}
		p.data = append(p.data, value...)
	}
}

// wanted says whether the current event may carry usage. Anthropic names
// every event; an unnamed one is judged by its data's type.
func (p *sseUsage) wanted() bool {
	return p.event == "" || p.event == "message_start" || p.event == "message_delta"
}

func (p *sseUsage) dispatch() {
	if !p.wanted() {
		return
	}
	var ev struct {
		Type    string `json:"type"`
		Message *struct {
			Model string     `json:"model"`
			Usage *wireUsage `json:"usage"`
		} `json:"message"`
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(p.data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			if ev.Message.Model != "" {
				p.u.Model = ev.Message.Model
			}
			p.u.set(ev.Message.Usage)
		}
	case "message_delta":
		p.u.update(ev.Usage)
	}
}

// Usage returns the usage of the events dispatched so far. An event cut off
// by the end of the stream does not count.
func (p *sseUsage) Usage() usage { return p.u }

// jsonUsage reads the model and usage of a non-streaming response body. ok
// is false when the body is not a JSON object.
func jsonUsage(body []byte) (u usage, ok bool) {
	var msg struct {
		Model string     `json:"model"`
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return usage{}, false
	}
	u.Model = msg.Model
	u.set(msg.Usage)
	return u, true
}

// meter watches one response body go by.
type meter struct {
	streamed bool
	sse      sseUsage     // when streamed
	body     bytes.Buffer // when not: the first maxJSONCapture bytes
	overflow bool         // the body passed maxJSONCapture
}

func newMeter(h http.Header) *meter {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return &meter{streamed: mt == "text/event-stream"}
}

func (m *meter) write(b []byte) {
	switch {
	case m.streamed:
		m.sse.Write(b)
	case m.overflow:
	case m.body.Len()+len(b) > maxJSONCapture:
		m.overflow = true
		m.body = bytes.Buffer{}
	default:
		m.body.Write(b)
	}
}

// usage returns what the body has shown so far.
func (m *meter) usage() usage {
	if m.streamed {
		return m.sse.Usage()
	}
	if m.overflow {
		return usage{}
	}
	u, _ := jsonUsage(m.body.Bytes())
	return u
}

// meteredBody feeds a response body to its meter as the proxy reads it. It
// adds no buffering: each Read returns what the upstream read returned.
// ReverseProxy reads and closes it from the handler's goroutine only.
type meteredBody struct {
	io.ReadCloser
	m *meter
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.m.write(p[:n])
	}
	return n, err
}
