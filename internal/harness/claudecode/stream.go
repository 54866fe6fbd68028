package claudecode

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
)

// cliLine is one line of the CLI's stream-json output. Only the fields the
// harness uses are decoded; the CLI sends many more.
type cliLine struct {
	Type            string          `json:"type"`
	Subtype         string          `json:"subtype"`
	SessionID       string          `json:"session_id"`
	ParentToolUseID *string         `json:"parent_tool_use_id"`
	Message         json.RawMessage `json:"message"` // assistant, user
	Event           json.RawMessage `json:"event"`   // stream_event

	// assistant: a message the CLI made up itself to show an API error.
	IsAPIErrorMessage bool `json:"is_api_error_message"`

	// result
	IsError        bool     `json:"is_error"`
	Result         string   `json:"result"`
	StopReason     *string  `json:"stop_reason"`
	Errors         []string `json:"errors"`
	APIErrorStatus *int     `json:"api_error_status"`
	APIErrorType   string   `json:"api_error_type"`
	TerminalReason string   `json:"terminal_reason"`

	// system/api_retry
	Attempt     int  `json:"attempt"`
	MaxRetries  int  `json:"max_retries"`
	ErrorStatus *int `json:"error_status"`

	// control_request
	RequestID string `json:"request_id"`
}

// apiMessage is an assistant or user message as the CLI prints it: the
// Messages API's own shape.
type apiMessage struct {
	ID      string     `json:"id"`
	Role    string     `json:"role"`
	Model   string     `json:"model"`
	Content apiContent `json:"content"`
	Usage   *apiUsage  `json:"usage"`
}

// apiContent is a message's content: a string or an array of blocks.
type apiContent []apiBlock

func (c *apiContent) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = apiContent{{Type: "text", Text: s}}
		return nil
	}
	var blocks []apiBlock
	if err := json.Unmarshal(b, &blocks); err != nil {
		return err
	}
	*c = blocks
	return nil
}

type apiBlock = harness.Block

type apiUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// streamEvent is the Messages API streaming event inside a stream_event
// line (--include-partial-messages).
type streamEvent struct {
	Type    string      `json:"type"`
	Index   int         `json:"index"`
	Message *apiMessage `json:"message"` // message_start
	Delta   struct {
		Type       string `json:"type"`
		Text       string `json:"text"`
		StopReason string `json:"stop_reason"`
	} `json:"delta"`
	Usage *apiUsage `json:"usage"` // message_delta
}

// modelCall is one assistant message being received.
type modelCall struct {
	id, model  string
	usage      apiUsage
	streamed   bool // text came as stream events, so not again from the assistant lines
	blocks     []apiBlock
	deltaText  strings.Builder
	stopReason string
}

type openTool struct {
	name   string
	start  time.Time
	parent string // the Agent call whose sub-agent made this call; "" for the main agent
}

// mapper turns the CLI's stream-json lines of one turn into contract events,
// reports and transcript records. It is not safe for concurrent use.
type mapper struct {
	emit          func(contract.Event)
	report        func(contract.Report)
	record        func(json.RawMessage) error // appends to the session transcript
	now           func() time.Time
	log           *slog.Logger
	maxToolOutput int
	// reply writes a line to the CLI's stdin (answers to its control
	// requests); nil drops them.
	reply func([]byte)
	// started, when set, learns of each tool call as tool.started is
	// emitted for it, so that the worker's MCP endpoint can tie a call it
	// receives to the model's tool_use.
	started func(id, name string)

	sawInit    bool
	sessionID  string // from the lines, the CLI's own session id
	cur        *modelCall
	calls      int
	open       map[string]openTool
	openOrder  []string
	recordErr  error // the first transcript failure
	lastReason string
}

func newMapper(t *harness.Turn, now func() time.Time, log *slog.Logger, maxToolOutput int) *mapper {
	return &mapper{
		emit: t.Emit, report: t.Report, record: t.Transcript.Append,
		now: now, log: log, maxToolOutput: maxToolOutput,
		open: make(map[string]openTool),
	}
}

// message decodes the message of a line whose kind (as "a user") says
// whose it is; nil, logged, when it cannot be read.
func (m *mapper) message(raw json.RawMessage, kind string) *apiMessage {
	var msg apiMessage
	if err := json.Unmarshal(raw, &msg); err != nil {
		m.log.Warn("claude code printed "+kind+" message that could not be read", "err", err)
		return nil
	}
	return &msg
}

// handle maps one line. done reports that the turn ended (a result line);
// then res or err is its outcome.
func (m *mapper) handle(raw []byte) (done bool, res harness.Result, err error) {
	var l cliLine
	if err := json.Unmarshal(raw, &l); err != nil {
		m.log.Warn("claude code printed a line that is not JSON; ignored", "err", err, "bytes", len(raw))
		return false, res, nil
	}
	if l.SessionID != "" {
		m.sessionID = l.SessionID
	}
	if l.ParentToolUseID != nil && *l.ParentToolUseID != "" {
		m.subAgent(&l, *l.ParentToolUseID)
		return false, res, nil
	}
	switch l.Type {
	case "stream_event":
		m.streamEvent(l.Event)
	case "assistant":
		if l.IsAPIErrorMessage {
			// The CLI's own text about a failed API call; the result line
			// that follows carries the error.
			return false, res, nil
		}
		if msg := m.message(l.Message, "an assistant"); msg != nil {
			m.assistant(msg)
		}
	case "user":
		m.flush()
		if msg := m.message(l.Message, "a user"); msg != nil {
			m.toolResults(msg)
		}
	case "result":
		m.flush()
		m.closeOpenTools("The tool call ended without a result.")
		res, err = m.result(&l)
		if err == nil && m.recordErr != nil {
			err = persistErr(m.recordErr)
		}
		return true, res, err
	case "control_request":
		// Nothing can answer the CLI's questions (permission prompts are
		// off); say so rather than leave it waiting.
		m.log.Warn("claude code asked a control request; refused", "request_id", l.RequestID)
		if m.reply != nil {
			b, _ := json.Marshal(map[string]any{"type": "control_response", "response": map[string]any{
				"subtype": "error", "request_id": l.RequestID, "error": "not supported by the TalkIDE harness",
			}})
			m.reply(append(b, '\n'))
		}
	case "system":
		if l.Subtype == "init" {
			m.sawInit = true
		}
		if l.Subtype == "api_retry" {
			status := 0
			if l.ErrorStatus != nil {
				status = *l.ErrorStatus
			}
			m.log.Info("claude code retries a model call", "attempt", l.Attempt, "max_retries", l.MaxRetries, "status", status)
		}
	}
	return false, res, nil
}

// begun reports whether the CLI started the session (so a failure is not a
// failed resume).
func (m *mapper) begun() bool { return m.sawInit || m.calls > 0 }

func (m *mapper) streamEvent(raw json.RawMessage) {
	var ev streamEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		if ev.Message == nil {
			return
		}
		if m.cur != nil && m.cur.id != ev.Message.ID {
			m.flush()
		}
		if m.cur == nil {
			m.start(ev.Message)
		}
		m.cur.streamed = true
	case "content_block_delta":
		if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" && m.cur != nil {
			m.cur.streamed = true
			m.cur.deltaText.WriteString(ev.Delta.Text)
			m.emit(contract.Event{Kind: contract.KindTextDelta, Text: ev.Delta.Text, Index: ev.Index})
		}
	case "message_delta":
		if m.cur == nil {
			return
		}
		if ev.Delta.StopReason != "" {
			m.cur.stopReason = ev.Delta.StopReason
		}
		if u := ev.Usage; u != nil {
			m.cur.usage.OutputTokens = u.OutputTokens
			if u.InputTokens > 0 {
				m.cur.usage.InputTokens = u.InputTokens
			}
			if u.CacheCreationInputTokens > 0 {
				m.cur.usage.CacheCreationInputTokens = u.CacheCreationInputTokens
			}
			if u.CacheReadInputTokens > 0 {
				m.cur.usage.CacheReadInputTokens = u.CacheReadInputTokens
			}
		}
	case "message_stop":
		m.flush()
	}
}

func (m *mapper) start(msg *apiMessage) {
	m.cur = &modelCall{id: msg.ID, model: msg.Model}
	if msg.Usage != nil {
		m.cur.usage = *msg.Usage
	}
	m.calls++
}

// assistant takes one assistant line: the CLI prints one per content block,
// all with the message's id.
func (m *mapper) assistant(msg *apiMessage) {
	if m.cur != nil && m.cur.id != msg.ID {
		m.flush()
	}
	if m.cur == nil {
		m.start(msg)
	}
	for _, b := range msg.Content {
		switch b.Type {
		case "text", "tool_use":
			m.cur.blocks = append(m.cur.blocks, b)
			if b.Type == "text" && !m.cur.streamed && b.Text != "" {
				// Without stream events the text arrives whole.
				m.emit(contract.Event{Kind: contract.KindTextDelta, Text: b.Text})
			}
		}
	}
}

// flush ends the model call in progress: the assistant message, its usage,
// then the tool calls it asked for, as the native harness orders them.
func (m *mapper) flush() {
	c := m.cur
	if c == nil {
		return
	}
	m.cur = nil
	var text strings.Builder
	var uses []apiBlock
	for _, b := range c.blocks {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			uses = append(uses, b)
		}
	}
	if text.Len() == 0 && c.deltaText.Len() > 0 {
		// The assistant line never came (or was too long to read).
		text.WriteString(c.deltaText.String())
		c.blocks = append([]apiBlock{{Type: "text", Text: c.deltaText.String()}}, c.blocks...)
	}
	m.emit(contract.Event{Kind: contract.KindMessage, Text: text.String()})
	u := contract.Usage{
		Model:                    c.model,
		InputTokens:              c.usage.InputTokens,
		OutputTokens:             c.usage.OutputTokens,
		CacheCreationInputTokens: c.usage.CacheCreationInputTokens,
		CacheReadInputTokens:     c.usage.CacheReadInputTokens,
	}
	m.emit(contract.Event{Kind: contract.KindUsage, Usage: &u})
	m.report(contract.Report{Kind: contract.ReportUsage, IdempotencyKey: "usage-" + c.id, Usage: &u})
	if c.stopReason != "" {
		m.lastReason = c.stopReason
	}
	if len(c.blocks) > 0 {
		m.appendRecord("assistant", c.blocks)
	}
	for _, b := range uses {
		m.startTool(b, "")
	}
}

func (m *mapper) startTool(b apiBlock, parent string) {
	input := b.Input
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage("{}")
	}
	m.emit(contract.Event{Kind: contract.KindToolStarted, ParentToolUseID: parent, Tool: &contract.ToolEvent{ID: b.ID, Name: b.Name, Input: input}})
	if m.started != nil {
		m.started(b.ID, b.Name)
	}
	if _, dup := m.open[b.ID]; !dup {
		m.openOrder = append(m.openOrder, b.ID)
	}
	m.open[b.ID] = openTool{name: b.Name, start: m.now(), parent: parent}
}

// subAgent maps a line of a sub-agent, the work of an Agent (Task) call,
// onto events that name the call (parent_tool_use_id), so a client shows
// them nested under it. The CLI prints a sub-agent's messages whole, not
// streamed, and only some of them (its tool calls and their results; not
// always its text): what it prints is shown. None of it goes into the
// session's transcript, where the CLI keeps no sub-agent's messages
// either (it keeps them apart), and no usage is reported from these
// lines: they carry a call's usage before the call ended, and the gateway
// counts every call, a sub-agent's too, exactly.
func (m *mapper) subAgent(l *cliLine, parent string) {
	if l.Type != "assistant" && l.Type != "user" {
		return
	}
	msg := m.message(l.Message, "a sub-agent")
	if msg == nil {
		return
	}
	for _, b := range msg.Content {
		switch {
		case l.Type == "assistant" && b.Type == "text" && b.Text != "" && !l.IsAPIErrorMessage:
			m.emit(contract.Event{Kind: contract.KindMessage, ParentToolUseID: parent, Text: b.Text})
		case l.Type == "assistant" && b.Type == "tool_use":
			m.startTool(b, parent)
		case l.Type == "user" && b.Type == "tool_result":
			m.finishTool(b.ToolUseID, resultText(b.Content), b.IsError)
		}
	}
}

// toolResults finishes the tool calls a user line answers.
func (m *mapper) toolResults(msg *apiMessage) {
	var results []apiBlock
	for _, b := range msg.Content {
		if b.Type != "tool_result" {
			continue
		}
		results = append(results, b)
		out := resultText(b.Content)
		m.finishTool(b.ToolUseID, out, b.IsError)
	}
	if len(results) > 0 {
		m.appendRecord("user", results)
	}
}

func (m *mapper) finishTool(id, output string, isError bool) {
	t, ok := m.open[id]
	if !ok {
		m.log.Warn("claude code answered a tool call it never made; ignored", "tool_use_id", id)
		return
	}
	delete(m.open, id)
	for i, o := range m.openOrder {
		if o == id {
			m.openOrder = append(m.openOrder[:i], m.openOrder[i+1:]...)
			break
		}
	}
	out, truncated := truncate(output, m.maxToolOutput)
	dur := m.now().Sub(t.start).Milliseconds()
	m.emit(contract.Event{Kind: contract.KindToolFinished, ParentToolUseID: t.parent, Tool: &contract.ToolEvent{
		ID: id, Name: t.name, Output: out, Truncated: truncated, IsError: isError, DurationMS: dur,
	}})
	m.report(contract.Report{Kind: contract.ReportToolUse, IdempotencyKey: "tool-" + id,
		Tool: &contract.ToolReport{ID: id, Name: t.name, IsError: isError, DurationMS: dur}})
}

// closeOpenTools finishes every tool call still open with an error result,
// in the transcript too, so that it never holds a tool_use without its
// tool_result.
func (m *mapper) closeOpenTools(why string) {
	if len(m.openOrder) == 0 {
		return
	}
	var results []apiBlock
	for _, id := range append([]string(nil), m.openOrder...) {
		if m.open[id].parent == "" {
			// A sub-agent's calls are not in the transcript (see subAgent).
			content, _ := json.Marshal(why)
			results = append(results, apiBlock{Type: "tool_result", ToolUseID: id, Content: content, IsError: true})
		}
		m.finishTool(id, why, true)
	}
	if len(results) > 0 {
		m.appendRecord("user", results)
	}
}

// interrupted closes the turn's state after the CLI was stopped mid-turn.
// A model call cut off is dropped: its text was streamed, but it never
// completed.
func (m *mapper) interrupted() {
	m.cur = nil
	m.closeOpenTools(interruptedText)
}

const interruptedText = "The user interrupted this tool call; it was stopped."

func (m *mapper) appendRecord(role string, blocks []apiBlock) {
	if m.recordErr != nil {
		return
	}
	raw, err := json.Marshal(struct {
		Role    string     `json:"role"`
		Content []apiBlock `json:"content"`
	}{role, blocks})
	if err == nil {
		err = m.record(raw)
	}
	if err != nil {
		m.recordErr = err
		m.log.Error("the session transcript could not be written", "err", err)
	}
}

// result maps the turn's result line onto its outcome.
func (m *mapper) result(l *cliLine) (harness.Result, error) {
	res := harness.Result{ModelCalls: m.calls, StopReason: m.lastReason}
	if l.StopReason != nil && *l.StopReason != "" {
		res.StopReason = *l.StopReason
	}
	if !l.IsError && l.Subtype == "success" {
		if res.StopReason == "" {
			res.StopReason = "end_turn"
		}
		return res, nil
	}
	detail := l.Result
	if detail == "" && len(l.Errors) > 0 {
		detail = strings.Join(l.Errors, "; ")
	}
	detail, _ = truncate(detail, 500)
	cause := fmt.Errorf("claude code result %s (terminal_reason %q): %s", l.Subtype, l.TerminalReason, detail)
	switch {
	case l.Subtype == "error_max_turns" || l.TerminalReason == "max_turns":
		return res, &harness.TurnError{Code: contract.FailMaxTurns, Message: "the turn reached its limit of model calls", Err: cause}
	case l.APIErrorStatus != nil:
		if te := budgetFailure(*l.APIErrorStatus, l.Result, cause); te != nil {
			return res, te
		}
		return res, apiError(*l.APIErrorStatus, l.APIErrorType, detail, cause)
	case l.Subtype == "success":
		// is_error without an API status: the CLI could not use the model
		// (e.g. it was refused a credential).
		return res, &harness.TurnError{Code: contract.FailModelError, Message: "the model call failed: " + detail, Retryable: true, Err: cause}
	default:
		return res, &harness.TurnError{Code: contract.FailInternal, Message: "Claude Code failed to run the turn", Retryable: true, Err: cause}
	}
}

// apiError maps a model API failure as the native harness does.
func apiError(status int, typ, detail string, cause error) *harness.TurnError {
	te := &harness.TurnError{HTTPStatus: status, Err: cause}
	switch {
	case status == http.StatusTooManyRequests:
		te.Code, te.Message, te.Retryable = contract.FailRateLimited, "the model API is rate limited; try again later", true
	case status == 529 || typ == "overloaded_error":
		te.Code, te.Message, te.Retryable = contract.FailOverloaded, "the model is overloaded; try again shortly", true
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		te.Code, te.Message = contract.FailAuth, "the gateway refused the worker's credentials"
	case status >= 500:
		te.Code, te.Message, te.Retryable = contract.FailModelError, "the model API failed", true
	default:
		te.Code, te.Message = contract.FailModelError, "the model API rejected the request: "+strings.TrimPrefix(detail, fmt.Sprintf("API Error: %d ", status))
	}
	return te
}

// budgetFailure maps a 429 that a budget limit, not the model API, answered.
// The CLI shows only the error's message ("API Error: Request rejected
// (429) · budget: …"), not the gateway's talkide_budget object, so the
// message's prefix (contract.BudgetMessagePrefix) is what tells; a CLI that
// prints the whole body instead ("API Error: 429 {…}") gives the object
// too. Nil when text is no budget denial.
func budgetFailure(status int, text string, cause error) *harness.TurnError {
	if status != http.StatusTooManyRequests {
		return nil
	}
	var msg string
	var b *contract.BudgetDenial
	if i := strings.IndexByte(text, '{'); i >= 0 {
		var body struct {
			Error struct {
				Message string                 `json:"message"`
				Budget  *contract.BudgetDenial `json:"talkide_budget"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(text[i:]), &body) == nil && body.Error.Budget != nil {
			msg, b = body.Error.Message, body.Error.Budget
		}
	}
	if b == nil {
		if i := strings.Index(text, "· "+contract.BudgetMessagePrefix); i >= 0 {
			msg = text[i+len("· "):]
		} else if strings.HasPrefix(text, contract.BudgetMessagePrefix) {
			msg = text
		} else {
			return nil
		}
	}
	msg, _ = truncate(strings.TrimPrefix(msg, contract.BudgetMessagePrefix), 500)
	return &harness.TurnError{Code: contract.FailBudgetExhausted, HTTPStatus: status, Budget: b, Err: cause,
		Message: "the budget is exhausted: " + msg,
		// Without the details nothing says that calls in flight alone
		// stood in the way (the CLI retried those itself).
		Retryable: b != nil && b.InFlight}
}

// resultText is a tool_result's content as text: a string, or its text
// blocks joined with newlines (images and other blocks are named).
func resultText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	var blocks []apiBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return string(raw)
	}
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		} else {
			parts = append(parts, "["+b.Type+"]")
		}
	}
	return strings.Join(parts, "\n")
}

// truncate cuts s to at most max bytes at a character boundary, with a note.
func truncate(s string, max int) (string, bool) {
	if max <= 0 || len(s) <= max {
		return s, false
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[output truncated: %d of %d bytes shown]", cut, len(s)), true
}

func persistErr(err error) error {
	return &harness.TurnError{Code: contract.FailInternal, Message: "the session could not be saved", Retryable: true, Err: err}
}
