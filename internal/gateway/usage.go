package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/talkide/platform/internal/budget"
	"github.com/talkide/platform/internal/contract"
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
	// The split of CacheCreationInputTokens by time to live
	// (usage.cache_creation), when the response gives it.
	CacheWrite5mTokens int64
	CacheWrite1hTokens int64
	// usage.server_tool_use.
	WebSearchRequests int64
	WebFetchRequests  int64
}

// wireUsage is Anthropic's usage object. A count tells absent from zero.
type wireUsage struct {
	InputTokens              count          `json:"input_tokens"`
	OutputTokens             count          `json:"output_tokens"`
	CacheCreationInputTokens count          `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     count          `json:"cache_read_input_tokens"`
	CacheCreation            *cacheCreation `json:"cache_creation"`
	ServerToolUse            *serverToolUse `json:"server_tool_use"`
}

// cacheCreation is a usage's cache_creation: its cache writes by time to
// live.
type cacheCreation struct {
	Ephemeral5m count `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h count `json:"ephemeral_1h_input_tokens"`
}

// serverToolUse is a usage's server_tool_use.
type serverToolUse struct {
	WebSearchRequests count `json:"web_search_requests"`
	WebFetchRequests  count `json:"web_fetch_requests"`
}

// count is an integer of a usage object that tells absent (or null) from
// zero, as an *int64 would, without the allocation json.Unmarshal makes
// for every pointer it fills (five per stream). It takes what
// encoding/json takes into an int64, and refuses the rest (a fraction, an
// exponent, a string, an overflow) with an error, as encoding/json does.
type count struct {
	v   int64
	set bool
}

func (c *count) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*c = count{} // as a pointer set to nil
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return err
	}
	*c = count{v: v, set: true}
	return nil
}

// set copies every field present in w (message_start, a JSON body).
func (u *usage) set(w *wireUsage) { u.apply(w, false) }

// update applies a message_delta, whose counts are cumulative: the last
// output_tokens wins; the other counts replace earlier ones only when
// non-zero.
func (u *usage) update(w *wireUsage) { u.apply(w, true) }

func (u *usage) apply(w *wireUsage, delta bool) {
	if w == nil {
		return
	}
	setIf(&u.OutputTokens, w.OutputTokens, false)
	setIf(&u.InputTokens, w.InputTokens, delta)
	setIf(&u.CacheCreationInputTokens, w.CacheCreationInputTokens, delta)
	setIf(&u.CacheReadInputTokens, w.CacheReadInputTokens, delta)
	if c := w.CacheCreation; c != nil {
		setIf(&u.CacheWrite5mTokens, c.Ephemeral5m, delta)
		setIf(&u.CacheWrite1hTokens, c.Ephemeral1h, delta)
	}
	if t := w.ServerToolUse; t != nil {
		setIf(&u.WebSearchRequests, t.WebSearchRequests, delta)
		setIf(&u.WebFetchRequests, t.WebFetchRequests, delta)
	}
}

// budget returns u as the budget charges it. Cache writes the response does
// not split by time to live are 5-minute writes, the API's default.
func (u usage) budget() budget.Usage {
	w5, w1 := u.CacheWrite5mTokens, u.CacheWrite1hTokens
	if rest := u.CacheCreationInputTokens - w5 - w1; rest > 0 {
		w5 += rest
	}
	return budget.Usage{
		Model:              u.Model,
		InputTokens:        u.InputTokens,
		OutputTokens:       u.OutputTokens,
		CacheWrite5mTokens: w5,
		CacheWrite1hTokens: w1,
		CacheReadTokens:    u.CacheReadInputTokens,
		WebSearchRequests:  u.WebSearchRequests,
		WebFetchRequests:   u.WebFetchRequests,
	}
}

// setIf stores v in dst when v is present (and non-zero, if nonZero). A
// negative count is stored as zero: usage is never negative.
func setIf(dst *int64, v count, nonZero bool) {
	if !v.set || nonZero && v.v == 0 {
		return
	}
	*dst = max(v.v, 0)
}

// sseUsage reads usage from an Anthropic event stream, incrementally, as the
// stream's bytes are written to it. It copies only the current line and the
// data of message_start and message_delta events; it never fails. It is not
// safe for concurrent use.
type sseUsage struct {
	u usage

	// content counts the characters of the text, tool input and thinking
	// that content_block_delta events carried: an estimate of the output
	// when the stream ends before its final message_delta.
	content int64
	// final is set by message_delta: the usage is the response's last word.
	final bool
	// check, when set, is called at the end of every message_start,
	// content_block_delta and message_delta event with the running usage;
	// when it returns false the stream is cut after that event.
	check func(running usage) bool
	cut   bool // check returned false

	line     []byte // the current line, when it spans writes
	overflow bool   // the current line passed maxSSELine and is skipped

	event   eventKind // event field of the current event
	data    []byte    // data of the current event, when wanted
	hasData bool
	skip    bool // the current event's data passed maxSSEData
}

// Write consumes the next bytes of the stream.
func (p *sseUsage) Write(b []byte) (int, error) {
	p.feed(b)
	return len(b), nil
}

// feed consumes the next bytes of the stream, up to the end of the event
// after which check asked to cut it: it returns how many bytes belong to
// the stream the client gets. After a cut it consumes nothing more.
func (p *sseUsage) feed(b []byte) int {
	if p.cut {
		return 0
	}
	n := 0
	for n < len(b) {
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			p.appendLine(b[n:])
			return len(b)
		}
		seg := b[n : n+i]
		n += i + 1
		line := seg
		if len(p.line) > 0 || p.overflow {
			p.appendLine(seg)
			line = p.line
		}
		if !p.overflow {
			p.processLine(bytes.TrimSuffix(line, []byte("\r")))
		}
		p.line, p.overflow = p.line[:0], false
		if p.cut {
			return n
		}
	}
	return n
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
		checked := p.hasData && (p.event == evMessageStart || p.event == evMessageDelta || p.event == evContentBlockDelta)
		if p.hasData && !p.skip {
			p.dispatch()
		}
		p.event, p.data, p.hasData, p.skip = evNone, p.data[:0], false, false
		if checked && p.check != nil && !p.check(p.Running()) {
			p.cut = true
		}
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
		p.event = eventKindOf(value)
	case "data":
		more := p.hasData
		p.hasData = true
		if p.event == evContentBlockDelta {
			p.content += deltaChars(value)
		}
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
	return p.event == evNone || p.event == evMessageStart || p.event == evMessageDelta
}

// eventKind is an event's name, as far as the meter tells names apart:
// naming it by a number, not a string, saves an allocation per event.
type eventKind uint8

const (
	evNone              eventKind = iota // no event field (yet)
	evOther                              // a name the meter does not read
	evMessageStart                       // message_start
	evMessageDelta                       // message_delta
	evContentBlockDelta                  // content_block_delta
)

func eventKindOf(name []byte) eventKind {
	switch string(name) { // no allocation: the compiler compares in place
	case "":
		return evNone
	case "message_start":
		return evMessageStart
	case "message_delta":
		return evMessageDelta
	case "content_block_delta":
		return evContentBlockDelta
	}
	return evOther
}

// typeField is an event data's "type", decoded as its eventKind: what a
// string field would say, without the string encoding/json allocates for
// it. A name spelt with escapes is decoded as a string first.
type typeField eventKind

func (k *typeField) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as into a string: left as it was
	}
	if len(b) < 2 || b[0] != '"' || bytes.IndexByte(b, '\\') >= 0 {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*k = typeField(eventKindOf([]byte(s)))
		return nil
	}
	*k = typeField(eventKindOf(b[1 : len(b)-1]))
	return nil
}

func (p *sseUsage) dispatch() {
	if !p.wanted() {
		return
	}
	var ev event
	if !ev.scan(p.data, false) {
		p.dispatchJSON()
		return
	}
	switch eventKind(ev.typ) {
	case evMessageStart:
		if ev.message {
			if contract.ValidModelName(string(ev.model)) {
				p.u.Model = string(ev.model)
			}
			ev.msgUsage.applyTo(&p.u, false)
		}
	case evMessageDelta:
		ev.usage.applyTo(&p.u, true)
		p.final = true
	}
}

// dispatchJSON is dispatch by encoding/json: the answer the scanner is held
// to, and what dispatch falls back on when the scanner cannot be sure of it.
func (p *sseUsage) dispatchJSON() {
	var ev struct {
		Type    typeField `json:"type"`
		Message *struct {
			Model string     `json:"model"`
			Usage *wireUsage `json:"usage"`
		} `json:"message"`
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(p.data, &ev) != nil {
		return
	}
	switch eventKind(ev.Type) {
	case evMessageStart:
		if ev.Message != nil {
			if contract.ValidModelName(ev.Message.Model) {
				p.u.Model = ev.Message.Model
			}
			p.u.set(ev.Message.Usage)
		}
	case evMessageDelta:
		p.u.update(ev.Usage)
		p.final = true
	}
}

// Usage returns the usage of the events dispatched so far. An event cut off
// by the end of the stream does not count.
func (p *sseUsage) Usage() usage { return p.u }

// Running returns Usage with the output at least what the content deltas
// so far suggest (a token for about four characters): what the stream has
// produced, before its final message_delta says exactly.
func (p *sseUsage) Running() usage {
	u := p.u
	u.OutputTokens = max(u.OutputTokens, (p.content+3)/4)
	return u
}

// deltaChars returns the length of the text, partial_json and thinking
// strings (still escaped) of the delta of a content_block_delta event's
// data, without decoding it.
func deltaChars(data []byte) int64 {
	s := scanner{b: data}
	if !s.consume('{') {
		return 0
	}
	var n int64
	for !s.consume('}') {
		key, ok := s.str()
		if !ok || !s.consume(':') {
			return n
		}
		s.ws()
		if keyIs(key, "delta") && s.consume('{') {
			for !s.consume('}') {
				k, ok := s.str()
				if !ok || !s.consume(':') {
					return n
				}
				s.ws()
				start := s.i
				if !s.skipValue() {
					return n
				}
				if keyIs(k, "text") || keyIs(k, "partial_json") || keyIs(k, "thinking") {
					n += int64(max(s.i-start-2, 0))
				}
				s.consume(',')
			}
		} else if !s.skipValue() {
			return n
		}
		s.consume(',')
	}
	return n
}

// jsonUsage reads the model and usage of a non-streaming response body. ok
// is false when the body is not a JSON object.
func jsonUsage(body []byte) (u usage, ok bool) {
	var ev event
	if !ev.scan(body, true) {
		return jsonUsageJSON(body)
	}
	if contract.ValidModelName(string(ev.model)) {
		u.Model = string(ev.model)
	}
	ev.usage.applyTo(&u, false)
	return u, true
}

// jsonUsageJSON is jsonUsage by encoding/json, as dispatchJSON is dispatch.
func jsonUsageJSON(body []byte) (u usage, ok bool) {
	var msg struct {
		Model string     `json:"model"`
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return usage{}, false
	}
	if contract.ValidModelName(msg.Model) {
		u.Model = msg.Model
	}
	u.set(msg.Usage)
	return u, true
}

// meter watches one response body go by.
type meter struct {
	streamed bool
	sse      sseUsage     // when streamed
	body     bytes.Buffer // when not: the first maxJSONCapture bytes
	overflow bool         // the body passed maxJSONCapture
	eof      bool         // the whole body was read
}

func newMeter(h http.Header) *meter {
	return &meter{streamed: isEventStream(h.Get("Content-Type"))}
}

// isEventStream says whether a Content-Type is text/event-stream, with
// any parameters: mime.ParseMediaType's answer, without the map of
// parameters it builds for every response.
func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// write consumes the next bytes of the body and returns how many of them
// the client is to get: all, unless a stream was cut.
func (m *meter) write(b []byte) int {
	switch {
	case m.streamed:
		return m.sse.feed(b)
	case m.overflow:
	case m.body.Len()+len(b) > maxJSONCapture:
		m.overflow = true
		m.body = bytes.Buffer{}
	default:
		m.body.Write(b)
	}
	return len(b)
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

// charged returns the usage to charge, and whether part of it is an
// estimate: a stream that ended without its final message_delta (cut off,
// broken, an error event, a client gone for longer than the drain allows)
// is charged its input and at least the output its content suggests.
func (m *meter) charged() (u usage, estimated bool) {
	if !m.streamed {
		return m.usage(), false
	}
	if m.sse.final {
		return m.sse.Usage(), false
	}
	return m.sse.Running(), true
}

// meteredBody feeds a response body to its meter as the proxy reads it. It
// adds no buffering: each Read returns what the upstream read returned. When
// the meter cuts a stream, it returns the stream up to the cut, then tail
// (a final error event), then io.EOF, and closes the upstream at once. When
// the proxy closes it before the end (the client went away), it reads the
// rest into the meter (drain), so that the call is charged what the
// upstream produced. ReverseProxy reads and closes it from the handler's
// goroutine only.
type meteredBody struct {
	io.ReadCloser
	m     *meter
	drain bool                 // read the rest on an early Close
	tail  func() []byte        // the event that ends a cut stream
	timer func() (stop func()) // bounds a drain
	cut   []byte               // set when cut: what is left of tail to return
	done  bool
}

func (b *meteredBody) Read(p []byte) (int, error) {
	if b.cut != nil {
		n := copy(p, b.cut)
		b.cut = b.cut[n:]
		if len(b.cut) == 0 {
			return n, io.EOF
		}
		return n, nil
	}
	if b.done {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		if k := b.m.write(p[:n]); k < n || b.m.sse.cut {
			b.done = true
			b.ReadCloser.Close() // the upstream stops generating
			b.cut = []byte{}
			if b.tail != nil {
				b.cut = b.tail()
			}
			if len(b.cut) == 0 {
				return k, io.EOF
			}
			return k, nil
		}
	}
	if err == io.EOF {
		b.m.eof = true
	}
	return n, err
}

func (b *meteredBody) Close() error {
	if !b.m.eof && !b.done && b.drain {
		b.done = true
		if b.timer != nil {
			defer b.timer()()
		}
		buf := make([]byte, 32<<10)
		for !b.m.sse.cut {
			n, err := b.ReadCloser.Read(buf)
			if n > 0 {
				b.m.write(buf[:n])
			}
			if err == io.EOF {
				b.m.eof = true
			}
			if err != nil {
				break
			}
		}
	}
	return b.ReadCloser.Close()
}
