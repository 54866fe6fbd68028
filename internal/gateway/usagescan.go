package gateway

// The meter reads the usage of every call from its message_start and
// message_delta events (or its JSON body) before the client gets them:
// decoding them with encoding/json put a score of allocations and several
// microseconds on the way to a stream's first byte. The scanner here reads
// the few fields the meter needs in place. What it reads is what the call
// is charged, so it must give encoding/json's answer for every input, to
// the last malformed byte: it validates the whole text as encoding/json
// does while it reads it, and gives up at the first fault, as it does
// wherever it cannot be sure of encoding/json's answer (a key or model
// spelt with escapes or non-ASCII bytes, a value of the wrong type, deep
// nesting); its answer counts only when it read all of the text. When it
// gives up, the caller asks encoding/json (dispatchJSON, jsonUsageJSON),
// whose error on an invalid text drops the event as before.
// FuzzSSEDispatchMatchesJSON and FuzzJSONUsageMatchesJSON hold it to them.

// maxScanDepth is the nesting the scanner follows before it leaves the
// text to encoding/json, which refuses text nested beyond 10000 levels.
// Anthropic's events nest a few levels.
const maxScanDepth = 64

// event is what the meter reads of an event's data, decoded as
// dispatchJSON's struct (or, for a body, jsonUsageJSON's) would be, with
// every pointer held as a flag beside its target, in place: nothing is
// allocated for it.
type event struct {
	typ      typeField
	message  bool   // "message" decoded to a non-nil pointer
	model    []byte // message's "model" (a body's, for a body), as spelt
	msgUsage usageObject
	usage    usageObject
}

// usageObject is a *wireUsage as encoding/json would leave it.
type usageObject struct {
	present  bool      // the pointer is not nil
	w        wireUsage // the counts; its pointers stay nil
	hasCache bool      // w.CacheCreation would not be nil
	hasTools bool      // w.ServerToolUse would not be nil
	cache    cacheCreation
	tools    serverToolUse
}

// applyTo applies o to u as usage.apply applies the *wireUsage.
func (o *usageObject) applyTo(u *usage, delta bool) {
	if !o.present {
		return
	}
	w := o.w
	if o.hasCache {
		w.CacheCreation = &o.cache
	}
	if o.hasTools {
		w.ServerToolUse = &o.tools
	}
	u.apply(&w, delta)
}

// scan decodes data into ev (zero on entry) as an event's data, or, if
// body, as a response body. It returns false when it cannot be sure of
// encoding/json's answer; then ev is to be ignored.
func (ev *event) scan(data []byte, body bool) bool {
	s := scanner{b: data}
	if !s.consume('{') {
		return false // null is an empty answer, the rest a failure: encoding/json tells
	}
	for first := true; ; first = false {
		key, done, ok := s.member(first)
		if !ok {
			return false
		}
		if done {
			break
		}
		switch {
		case nameIs(key, "usage"):
			ok = s.usageValue(&ev.usage)
		case body && nameIs(key, "model"):
			ok = s.modelValue(&ev.model)
		case !body && nameIs(key, "type"):
			ok = s.typeValue(&ev.typ)
		case !body && nameIs(key, "message"):
			ok = s.messageValue(ev)
		default:
			ok = s.validValue(1)
		}
		if !ok {
			return false
		}
	}
	s.ws()
	return s.i == len(s.b)
}

// messageValue reads the value of an event's "message".
func (s *scanner) messageValue(ev *event) bool {
	object, null := s.open()
	if null {
		ev.message, ev.model, ev.msgUsage = false, nil, usageObject{}
		return true
	}
	if !object {
		return false
	}
	// A repeated "message" fills the struct the first one made.
	ev.message = true
	for first := true; ; first = false {
		key, done, ok := s.member(first)
		if !ok || done {
			return ok
		}
		switch {
		case nameIs(key, "model"):
			ok = s.modelValue(&ev.model)
		case nameIs(key, "usage"):
			ok = s.usageValue(&ev.msgUsage)
		default:
			ok = s.validValue(2)
		}
		if !ok {
			return false
		}
	}
}

// usageValue reads a value decoded into a *wireUsage.
func (s *scanner) usageValue(o *usageObject) bool {
	object, null := s.open()
	if null {
		*o = usageObject{}
		return true
	}
	if !object {
		return false
	}
	o.present = true // a repeated "usage" fills the same struct
	for first := true; ; first = false {
		key, done, ok := s.member(first)
		if !ok || done {
			return ok
		}
		switch {
		case nameIs(key, "input_tokens"):
			ok = s.countValue(&o.w.InputTokens)
		case nameIs(key, "output_tokens"):
			ok = s.countValue(&o.w.OutputTokens)
		case nameIs(key, "cache_creation_input_tokens"):
			ok = s.countValue(&o.w.CacheCreationInputTokens)
		case nameIs(key, "cache_read_input_tokens"):
			ok = s.countValue(&o.w.CacheReadInputTokens)
		case nameIs(key, "cache_creation"):
			ok = s.countPair(&o.hasCache, "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens", &o.cache.Ephemeral5m, &o.cache.Ephemeral1h)
		case nameIs(key, "server_tool_use"):
			ok = s.countPair(&o.hasTools, "web_search_requests", "web_fetch_requests", &o.tools.WebSearchRequests, &o.tools.WebFetchRequests)
		default:
			ok = s.validValue(3)
		}
		if !ok {
			return false
		}
	}
}

// countPair reads a value decoded into a pointer to a struct of two
// counts (a usage's cache_creation or server_tool_use): has says the
// pointer is not nil, the count named a goes into ca, the one named b
// into cb. null drops the struct; an object fills it, the one before
// included, as encoding/json fills what a pointer already points to.
func (s *scanner) countPair(has *bool, a, b string, ca, cb *count) bool {
	object, null := s.open()
	if null {
		*has, *ca, *cb = false, count{}, count{}
		return true
	}
	if !object {
		return false
	}
	*has = true
	for first := true; ; first = false {
		key, done, ok := s.member(first)
		if !ok || done {
			return ok
		}
		switch {
		case nameIs(key, a):
			ok = s.countValue(ca)
		case nameIs(key, b):
			ok = s.countValue(cb)
		default:
			ok = s.validValue(4)
		}
		if !ok {
			return false
		}
	}
}

// member reads the key of an object's next member and the colon after it:
// first says the object's '{' was read last, else a member's value was.
// done says the object ended instead. The key is returned unquoted; it is
// not ok when it is spelt with escapes or non-ASCII bytes, which
// encoding/json may match to a field after decoding or folding them.
func (s *scanner) member(first bool) (key []byte, done, ok bool) {
	if s.consume('}') {
		return nil, true, true
	}
	if !first && !s.consume(',') {
		return nil, false, false
	}
	q, ok := s.str()
	if !ok || !plainString(q) || !s.consume(':') {
		return nil, false, false
	}
	return q[1 : len(q)-1], false, true
}

// nameIs says whether a key without escapes or non-ASCII bytes names the
// field whose JSON name is name (lower case), as encoding/json matches
// keys to fields: regardless of case.
func nameIs(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

// open reads the start of a value decoded into a pointer to a struct:
// object says it is an object (its '{' read), null that it is null (read).
// Neither means anything else, which encoding/json refuses.
func (s *scanner) open() (object, null bool) {
	if s.consume('{') {
		return true, false
	}
	return false, s.literalIs("null")
}

// literalIs reads a literal and says whether it is lit.
func (s *scanner) literalIs(lit string) bool {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != lit[0] {
		return false
	}
	start := s.i
	return s.skipValue() && string(s.b[start:s.i]) == lit
}

// countValue reads a value decoded into a count, by count's own decoder:
// an integer or null. A string, object or array, which count refuses, is
// not read.
func (s *scanner) countValue(c *count) bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"', '{', '[':
		return false
	}
	start := s.i
	if !s.skipValue() {
		return false
	}
	lit := s.b[start:s.i]
	return validLiteral(lit) && c.UnmarshalJSON(lit) == nil
}

// typeValue reads the value of an event's "type", by typeField's own
// decoder: a string or null.
func (s *scanner) typeValue(k *typeField) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '"' {
		q, ok := s.str()
		return ok && validString(q) && k.UnmarshalJSON(q) == nil
	}
	return s.literalIs("null") // leaves k as it was
}

// modelValue reads a value decoded into a string: a string, or null, which
// leaves it as it was. A string with escapes or non-ASCII bytes is left to
// encoding/json, which decodes (and corrects) them.
func (s *scanner) modelValue(m *[]byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '"' {
		q, ok := s.str()
		if !ok || !plainString(q) {
			return false
		}
		*m = q[1 : len(q)-1]
		return true
	}
	return s.literalIs("null")
}

// validValue skips a value, and says whether it is valid JSON (nested in
// depth objects or arrays) that the scanner can vouch for.
func (s *scanner) validValue(depth int) bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '"':
		q, ok := s.str()
		return ok && validString(q)
	case '{', '[':
		if depth >= maxScanDepth {
			return false
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.i++
		if s.consume(end) {
			return true
		}
		for {
			if c == '{' {
				q, ok := s.str()
				if !ok || !validString(q) || !s.consume(':') {
					return false
				}
			}
			if !s.validValue(depth + 1) {
				return false
			}
			if s.consume(end) {
				return true
			}
			if !s.consume(',') {
				return false
			}
		}
	default:
		start := s.i
		return s.skipValue() && validLiteral(s.b[start:s.i])
	}
}

// validString says whether a string as str returns it (quotes and all) is
// valid JSON: no control characters, only JSON's escapes. Like
// encoding/json, it takes bytes that are not UTF-8.
func validString(q []byte) bool {
	b := q[1 : len(q)-1]
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c < ' ':
			return false
		case c != '\\':
			i++
		case i+1 >= len(b):
			return false
		default:
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return false
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				i += 6
			default:
				return false
			}
		}
	}
	return true
}

// plainString says whether a string as str returns it is valid JSON that
// decodes to its own bytes and holds no other byte than ASCII: no escapes,
// no control characters below space, nothing encoding/json would correct.
func plainString(q []byte) bool {
	for _, c := range q[1 : len(q)-1] {
		if c < ' ' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

// validLiteral says whether b is one of JSON's literals or numbers.
func validLiteral(b []byte) bool {
	switch string(b) {
	case "true", "false", "null":
		return true
	}
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(b)
}

// digits returns the index of the first byte at or after i in b that is
// not a decimal digit.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
