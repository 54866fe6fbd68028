package chatclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
)

// Limits on what the client reads from the control-plane.
const (
	maxBody    = 1 << 20 // bytes of a JSON response body
	maxSSELine = 1 << 20 // bytes of one line of the event stream
)

// Defaults of the timing knobs of a Client (see Client's fields).
const (
	defaultRequestTimeout = 30 * time.Second
	defaultIdleTimeout    = 90 * time.Second
	// sendAttempts bounds the tries of one Send: a message typed into a
	// chat that cannot be delivered should say so within seconds.
	sendAttempts = 4
	// defaultSendPatience bounds how long a Send keeps following the
	// server's Retry-After. Such a refusal (the worker at its bound on
	// running turns, a replica handing the conversation over during a
	// rollout, shutting down) is the platform working as designed, not a
	// failure, so it costs no attempt; a hand-over takes a terminating
	// pod's preStop and its running turn's end, seconds, not minutes.
	defaultSendPatience = 45 * time.Second
	// maxRetryAfter is the longest wait a Retry-After may ask of a send.
	maxRetryAfter = 10 * time.Second
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrNotFound matches an *APIError with status 404.
	ErrNotFound = errors.New("not found")
	// ErrTurnRunning matches an *APIError with code "turn_running": the
	// conversation already has a running turn.
	ErrTurnRunning = errors.New("a turn is running")
	// ErrTurnFailed is wrapped by Session.Once when its turn ends with
	// turn.failed.
	ErrTurnFailed = errors.New("turn failed")
)

// APIError is an error answer of the browser API: the HTTP status and the
// code and message of its contract.Error body. Code is empty when the body
// was not in that shape (a proxy's error page, say).
type APIError struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the wait the answer's Retry-After asked for, in whole
	// seconds as the control-plane sends it; 0 when it asked none.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chatclient: HTTP %d", e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNotFound) and errors.Is(err, ErrTurnRunning)
// work on an *APIError.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrTurnRunning:
		return e.Code == contract.CodeTurnRunning
	}
	return false
}

// Options configures a Client. A nil *Options and zero fields mean defaults.
type Options struct {
	// HTTPClient sends every request. Nil means a client of its own over
	// http.DefaultTransport. Its Timeout must be zero (or longer than any
	// stream should live): Stream's responses do not end.
	HTTPClient *http.Client
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// Logger receives reconnects, retries and protocol warnings. Nil means
	// don't log.
	Logger *slog.Logger
}

// Client talks to the control-plane's browser API. It is safe for
// concurrent use.
type Client struct {
	base  string // scheme://host[/prefix], no trailing slash
	hc    *http.Client
	token string
	log   *slog.Logger

	// Timing, fixed by New; tests in this package shorten it.
	requestTimeout time.Duration  // bounds each attempt of a non-stream call
	idleTimeout    time.Duration  // a stream that yields no bytes this long is reconnected
	sendRetry      backoff.Policy // between the attempts of a send, and of a queued message
	streamRetry    backoff.Policy // between stream connections
	sendPatience   time.Duration  // how long a send follows Retry-After
	retryAfterMax  time.Duration  // the longest wait a Retry-After may ask
}

// New returns a client of the browser API at baseURL, e.g.
// "http://127.0.0.1:8080" (a path prefix is kept).
func New(baseURL string, opts *Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("chatclient: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("chatclient: base URL %q: want http://host or https://host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("chatclient: base URL %q: must not have a query, fragment or user info", baseURL)
	}
	o := defaults.Copy(opts)
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	defaults.Logger(&o.Logger)
	for i := 0; i < len(o.Token); i++ {
		if c := o.Token[i]; c <= ' ' || c >= 0x7f {
			return nil, errors.New("chatclient: token contains a character not allowed in a header")
		}
	}
	return &Client{
		base:           strings.TrimRight(u.String(), "/"),
		hc:             o.HTTPClient,
		token:          o.Token,
		log:            o.Logger,
		requestTimeout: defaultRequestTimeout,
		idleTimeout:    defaultIdleTimeout,
		sendRetry:      backoff.Policy{Base: 200 * time.Millisecond, Max: 2 * time.Second},
		streamRetry:    backoff.Policy{Base: 250 * time.Millisecond, Max: 5 * time.Second},
		sendPatience:   defaultSendPatience,
		retryAfterMax:  maxRetryAfter,
	}, nil
}

// conversationURL returns the URL of conversation id plus suffix ("",
// "/messages", ...), after checking the id.
func (c *Client) conversationURL(id, suffix string) (string, error) {
	if err := contract.ValidateConversationID(id); err != nil {
		return "", fmt.Errorf("chatclient: %w", err)
	}
	return c.base + "/api/conversations/" + url.PathEscape(id) + suffix, nil
}

func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// transportError is a failure to get a complete answer: the connection
// failed, or broke while the body was read. Such failures are transient.
type transportError struct{ err error }

func (e *transportError) Error() string { return "chatclient: " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// doJSON sends a request with body in (nil for none) and decodes a 2xx answer
// into out (nil to ignore it). It returns the status; a non-2xx answer is an
// *APIError, a transport failure a *transportError.
func (c *Client) doJSON(ctx context.Context, method, rawURL string, in, out any) (int, error) {
	if in == nil {
		return c.do(ctx, method, rawURL, "", nil, out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return 0, fmt.Errorf("chatclient: encoding request: %w", err)
	}
	return c.do(ctx, method, rawURL, "application/json", b, out)
}

// do is doJSON with the request's body as bytes of contentType ("" and
// nil: no body).
func (c *Client) do(ctx context.Context, method, rawURL, contentType string, in []byte, out any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		body = bytes.NewReader(in)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		return 0, fmt.Errorf("chatclient: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, &transportError{err}
	}
	defer resp.Body.Close()
	data, err := readLimited(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := apiError(resp.StatusCode, data)
		e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"))
		return resp.StatusCode, e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("chatclient: decoding answer of %s %s: %w", method, req.URL.Path, err)
		}
	}
	return resp.StatusCode, nil
}

var errBodyTooLarge = fmt.Errorf("chatclient: response body larger than %d bytes", maxBody)

// readLimited reads a whole response body of at most maxBody bytes.
func readLimited(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return nil, &transportError{err}
	}
	if len(data) > maxBody {
		return nil, errBodyTooLarge
	}
	return data, nil
}

// retryAfter reads a Retry-After of whole seconds (the control-plane's
// form); anything else, an HTTP date included, asks no wait.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > 3600 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// apiError decodes an error answer.
func apiError(status int, body []byte) *APIError {
	e := &APIError{Status: status}
	var ce contract.Error
	if json.Unmarshal(body, &ce) == nil && ce.Error.Code != "" {
		e.Code, e.Message = ce.Error.Code, ce.Error.Message
	} else {
		e.Message = http.StatusText(status)
	}
	return e
}
