// Package anthropicsim is a deterministic simulator of the Anthropic Messages
// API for tests and demos. It is NOT a model: replies are canned from
// directives in the last user message and every text starts with "[simulator] ".
//
// The simulator serves POST /v1/messages (streaming and not) and POST
// /v1/messages/count_tokens with the real API's authentication, JSON shapes,
// event sequence and error shapes, so that clients such as the official SDKs
// and Claude Code can be exercised without network access or cost. The reply
// is decided from the last message with role "user":
//
//   - [[tool:NAME {json}]] answers with a tool_use block per directive, when
//     the request offers NAME in its tools;
//   - else tool_result blocks are quoted (200 characters each);
//   - else the text "[simulator] messages=N you said: <text>".
//
// [[sleep:MS]] slows a reply down and [[error:STATUS]] answers with an API
// error instead. See docs/simulator.md for the directives, the usage formula
// and the cache rule.
//
// Message ids ("msg_sim_000001") and request ids ("req_sim_000001") count up
// per Simulator; everything else in a reply is a function of the request,
// except the cache fields of usage, which depend on earlier requests.
package anthropicsim

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/defaults"
)

const (
	// maxBodyBytes bounds a request body; larger ones get 413.
	maxBodyBytes = 32 << 20
	// maxPrefixes bounds the set of cache prefixes remembered; when full it
	// is emptied, which only turns a later cache read into a creation.
	maxPrefixes = 4096
)

// Options configures a Simulator. A nil *Options and zero fields mean the
// defaults.
type Options struct {
	// Logger receives a line when the simulator starts serving (its first
	// request) and one per request at debug level. nil: no logging.
	Logger *slog.Logger
	// Now is the clock used for request timings in the log. nil: time.Now.
	Now func() time.Time
	// ChunkDelay is the pause before each streamed content_block_delta.
	// 0 (for tests) means none. A [[sleep:MS]] directive overrides it.
	ChunkDelay time.Duration
	// KeepRequests is how many recent request bodies Requests returns;
	// 0 means DefaultKeepRequests.
	KeepRequests int
}

// Simulator is an http.Handler that simulates the Anthropic Messages API.
// It is safe for concurrent use.
type Simulator struct {
	keyHash    [sha256.Size]byte // the API key itself is not kept
	log        *slog.Logger
	now        func() time.Time
	chunkDelay time.Duration

	startOnce sync.Once
	msgSeq    atomic.Uint64
	reqSeq    atomic.Uint64

	keep int // how many recent request bodies Requests returns

	mu       sync.Mutex
	requests [][]byte                       // guarded by mu; the last keep bodies received on /v1/messages
	prefixes map[[sha256.Size]byte]struct{} // guarded by mu; cache prefixes seen, see inputUsage
}

// New returns a simulator that accepts apiKey, in x-api-key or as an
// Authorization bearer token. It panics if apiKey is empty.
func New(apiKey string, opts *Options) *Simulator {
	if apiKey == "" {
		panic("anthropicsim: New with an empty API key")
	}
	o := defaults.Copy(opts)
	defaults.Logger(&o.Logger)
	defaults.Clock(&o.Now)
	defaults.IfNotPositive(&o.KeepRequests, DefaultKeepRequests)
	return &Simulator{
		keyHash:    sha256.Sum256([]byte(apiKey)),
		log:        o.Logger,
		now:        o.Now,
		chunkDelay: max(o.ChunkDelay, 0),
		keep:       o.KeepRequests,
		prefixes:   make(map[[sha256.Size]byte]struct{}),
	}
}

// DefaultKeepRequests bounds the request bodies a simulator remembers, so
// that a long talkide dev session does not grow without end.
const DefaultKeepRequests = 1000

// Requests returns a copy of the most recent request bodies received on
// /v1/messages (at most Options.KeepRequests), oldest first: each
// authenticated request whose body could be read, valid or not.
func (s *Simulator) Requests() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	recent := s.requests[max(0, len(s.requests)-s.keep):]
	out := make([][]byte, len(recent))
	for i, b := range recent {
		out[i] = append([]byte(nil), b...)
	}
	return out
}

// LastMessages returns the messages array of the last request Requests
// holds and that request's body; an error when there is none, or when it
// is not a request's JSON.
func (s *Simulator) LastMessages() ([]json.RawMessage, []byte, error) {
	reqs := s.Requests()
	if len(reqs) == 0 {
		return nil, nil, errors.New("the simulator received no request")
	}
	last := reqs[len(reqs)-1]
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(last, &body); err != nil {
		return nil, last, fmt.Errorf("the simulator's last request: %w", err)
	}
	return body.Messages, last, nil
}

// ServeHTTP serves POST /v1/messages and POST /v1/messages/count_tokens; the
// query string is ignored. Any other path is 404 and any other method 405,
// both in the Anthropic error shape.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.startOnce.Do(func() {
		s.log.Info("anthropic simulator serving: a deterministic test and demo tool, NOT a model", "reply_marker", Marker)
	})
	began := s.now()
	reqID := fmt.Sprintf("req_sim_%06d", s.reqSeq.Add(1))
	w.Header().Set("request-id", reqID)

	info, err := s.serve(w, r)
	attrs := []any{"request_id", reqID, "method", r.Method, "path", r.URL.Path, "duration", s.now().Sub(began)}
	if info.model != "" {
		attrs = append(attrs, "model", info.model, "stream", info.stream)
	}
	var ae *apiError
	switch {
	case err == nil:
		s.log.Debug("anthropic simulator request", append(attrs, "status", http.StatusOK)...)
	case errors.As(err, &ae):
		writeError(w, ae)
		attrs = append(attrs, "status", ae.Status, "error_type", ae.Type, "error", ae.Msg)
		if ae.Err != nil {
			attrs = append(attrs, "cause", ae.Err)
		}
		s.log.Debug("anthropic simulator request", attrs...)
	default:
		// The response had begun; typically the client went away mid-stream.
		s.log.Debug("anthropic simulator response aborted", append(attrs, "error", err)...)
	}
}

// requestInfo is what a handler reports for the log line.
type requestInfo struct {
	model  string
	stream bool
}

// serve routes, authenticates and reads the body. An *apiError it returns has
// not been written yet; any other error came after the response began.
func (s *Simulator) serve(w http.ResponseWriter, r *http.Request) (requestInfo, error) {
	var handle func(http.ResponseWriter, *http.Request, []byte) (requestInfo, error)
	switch r.URL.Path {
	case "/v1/messages":
		handle = s.messages
	case "/v1/messages/count_tokens":
		handle = s.countTokens
	default:
		return requestInfo{}, newAPIError(http.StatusNotFound, "not found: the simulator serves POST /v1/messages and POST /v1/messages/count_tokens")
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return requestInfo{}, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Msg: "method " + r.Method + " not allowed, use POST"}
	}
	if !s.authorized(r) {
		return requestInfo{}, newAPIError(http.StatusUnauthorized, "invalid x-api-key")
	}
	body, err := readBody(w, r)
	if err != nil {
		return requestInfo{}, err
	}
	return handle(w, r, body)
}

// authorized reports whether r carries the key in x-api-key or as a bearer
// token. Both sides are hashed first, so the comparison takes the same time
// whatever the key's length.
func (s *Simulator) authorized(r *http.Request) bool {
	ok := false
	if k := r.Header.Get("x-api-key"); k != "" {
		ok = s.keyMatches(k)
	}
	if scheme, token, found := strings.Cut(r.Header.Get("Authorization"), " "); found && strings.EqualFold(scheme, "Bearer") && token != "" {
		ok = s.keyMatches(strings.TrimSpace(token)) || ok
	}
	return ok
}

func (s *Simulator) keyMatches(key string) bool {
	h := sha256.Sum256([]byte(key))
	return subtle.ConstantTimeCompare(h[:], s.keyHash[:]) == 1
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	tooLarge := newAPIError(http.StatusRequestEntityTooLarge, "request body exceeds %d MiB", maxBodyBytes>>20)
	if r.ContentLength > maxBodyBytes {
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge
	case err != nil:
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Msg: "could not read the request body", Err: err}
	}
	return body, nil
}

// messages serves POST /v1/messages.
func (s *Simulator) messages(w http.ResponseWriter, r *http.Request, body []byte) (requestInfo, error) {
	s.mu.Lock()
	s.requests = append(s.requests, body)
	if len(s.requests) > 2*s.keep {
		s.requests = append([][]byte(nil), s.requests[len(s.requests)-s.keep:]...)
	}
	s.mu.Unlock()

	req, err := parseRequest(body, true)
	if err != nil {
		return requestInfo{}, err
	}
	info := requestInfo{model: req.Model, stream: req.Stream}
	rep, err := s.decide(req, body)
	if err != nil {
		return info, err
	}
	id := fmt.Sprintf("msg_sim_%06d", s.msgSeq.Add(1))
	pause := s.chunkDelay
	if rep.HasSleep {
		pause = rep.Sleep
	}
	if !req.Stream {
		// Without deltas to space out, a [[sleep:MS]] delays the whole answer.
		if rep.HasSleep {
			if err := backoff.Sleep(r.Context(), rep.Sleep); err != nil {
				return info, err
			}
		}
		return info, writeJSON(w, rep.message(id, req.Model))
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	flush := func() { _ = rc.Flush() }
	return info, writeStream(r.Context(), w, flush, id, req.Model, rep, pause)
}

// countTokens serves POST /v1/messages/count_tokens. Directives are not
// looked at.
func (s *Simulator) countTokens(w http.ResponseWriter, _ *http.Request, body []byte) (requestInfo, error) {
	req, err := parseRequest(body, false)
	if err != nil {
		return requestInfo{}, err
	}
	return requestInfo{model: req.Model}, writeJSON(w, countTokensJSON{InputTokens: countTokens(len(body))})
}

func writeJSON(w http.ResponseWriter, v any) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(append(b, '\n'))
	return err
}
