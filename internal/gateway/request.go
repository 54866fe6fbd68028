package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// requestModel returns the model a request body names, or "" when the body
// is not a JSON object whose "model" is a string. Like encoding/json (and the
// API), the last "model" wins.
func requestModel(body []byte) string {
	return scanRequest(body).model
}

// scanned is what the gateway reads of a request body.
type scanned struct {
	model     string
	maxTokens int64
	// repeated names a key the gateway reads ("model", "max_tokens") that
	// the object has more than once, "" when none: the gateway refuses
	// such a body (ServeHTTP), since the upstream may take another of the
	// values than the scanner's (the last) and the call would be charged
	// and labelled as one model, or admitted by one max_tokens, and run as
	// another.
	repeated string
}

// scanRequest returns the model and max_tokens a request body names: "" and
// 0 when the body is not a JSON object, or when the field is absent or not a
// string (model) or an integer (max_tokens). The last of each wins, and
// repeated says that there was more than one.
//
// It scans the top level of the object and skips every other value without
// decoding or validating it: encoding/json spent most of the gateway's time
// on a large request just to find these. It reads untrusted input;
// FuzzRequestModel holds it to encoding/json's answer on valid JSON.
func scanRequest(body []byte) (out scanned) {
	s := scanner{b: body}
	if !s.consume('{') {
		return scanned{}
	}
	if s.consume('}') {
		return scanned{}
	}
	var sawModel, sawMax bool
	for {
		key, ok := s.str()
		if !ok || !s.consume(':') {
			return scanned{}
		}
		s.ws()
		switch {
		case keyIs(key, "model"):
			if sawModel && out.repeated == "" {
				out.repeated = "model"
			}
			sawModel = true
			v, ok := s.str()
			if !ok {
				return scanned{} // not a string (or broken): no model
			}
			var m string
			if json.Unmarshal(v, &m) != nil {
				return scanned{}
			}
			out.model = m
		case keyIs(key, "max_tokens"):
			if sawMax && out.repeated == "" {
				out.repeated = "max_tokens"
			}
			sawMax = true
			start := s.i
			if !s.skipValue() {
				return scanned{}
			}
			n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
			if err != nil || n < 0 {
				n = 0
			}
			out.maxTokens = n
		default:
			if !s.skipValue() {
				return scanned{}
			}
		}
		if s.consume('}') {
			return out
		}
		if !s.consume(',') {
			return scanned{}
		}
	}
}

// keyIs says whether a quoted, possibly escaped key is name.
func keyIs(quoted []byte, name string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return len(quoted) == len(name)+2 && string(quoted[1:len(quoted)-1]) == name
	}
	var k string
	return json.Unmarshal(quoted, &k) == nil && k == name
}

// scanner walks JSON text without building anything.
type scanner struct {
	b []byte
	i int
}

// ws skips whitespace.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips whitespace and then c, if c is next.
func (s *scanner) consume(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string at the cursor (after whitespace) and returns it with
// its quotes, still escaped.
func (s *scanner) str() ([]byte, bool) {
	s.ws()
	start := s.i
	if !s.skipString() {
		return nil, false
	}
	return s.b[start:s.i], true
}

// skipString skips a string starting at the cursor.
func (s *scanner) skipString() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	j := s.i + 1
	for {
		k := bytes.IndexByte(s.b[j:], '"')
		if k < 0 {
			return false
		}
		j += k
		// The quote ends the string unless an odd number of backslashes
		// precede it.
		n := 0
		for p := j - 1; p > s.i && s.b[p] == '\\'; p-- {
			n++
		}
		j++
		if n%2 == 0 {
			s.i = j
			return true
		}
	}
}

// skipValue skips one value at the cursor: a string, an object or array
// (by matching brackets outside strings), or a literal or number.
func (s *scanner) skipValue() bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default:
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.i > start
			}
			s.i++
		}
		return false
	}
}
