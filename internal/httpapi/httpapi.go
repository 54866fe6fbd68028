// Package httpapi holds what every TalkIDE JSON API shares: handlers that
// return errors, one error type that keeps what the client sees apart from
// what is logged, bounded JSON decoding, and the JSON error shape of
// contract.Error.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/talkide/platform/internal/bodyroom"
	"github.com/talkide/platform/internal/contract"
)

// retryLater reports whether e is a refusal the client is meant to retry:
// the codes that come with Retry-After.
func (e *Error) retryLater() bool {
	switch e.Code {
	case contract.CodeWorkerBusy, contract.CodeShuttingDown, contract.CodeSessionElsewhere, contract.CodeTooManyStreams, contract.CodeTooManyUploads:
		return true
	}
	return false
}

// Error is an HTTP error: Status and Code/Msg go to the client, Err only to
// the log.
type Error struct {
	Status int
	Code   string
	Msg    string
	Err    error
	// RetryAfter, when set, is sent as the Retry-After header (seconds).
	RetryAfter string
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Code, e.Msg, e.Err)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a formatted client message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// HandlerFunc is an http handler that returns an error instead of writing it.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handle adapts h: a returned *Error is written as JSON with its status; a
// *contract.FieldError is the client's mistake, answered 400 (413 when too
// large) with what is wrong; any other error is logged and answered with a
// 500 that reveals nothing.
func Handle(logger *slog.Logger, h HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		var he *Error
		if !errors.As(err, &he) {
			if fe, ok := errors.AsType[*contract.FieldError](err); ok {
				he = invalid(fe)
			} else {
				he = &Error{Status: http.StatusInternalServerError, Code: contract.CodeInternal, Msg: "internal error", Err: err}
			}
		}
		level := slog.LevelDebug
		if he.Status >= 500 && he.RetryAfter == "" && !he.retryLater() {
			level = slog.LevelError
		} else if he.Status >= 500 {
			// A refusal the client is told to retry (worker_busy,
			// shutting_down, session_elsewhere) is the system working as
			// meant under load or in a rollout: thousands of them a second
			// must not fill the log.
			level = slog.LevelDebug
		} else if he.Status == http.StatusUnauthorized || he.Status == http.StatusForbidden {
			level = slog.LevelWarn
		}
		if logger != nil {
			logger.Log(r.Context(), level, "request failed", "method", r.Method, "path", r.URL.Path,
				"status", he.Status, "code", he.Code, "err", he.Error())
		}
		if he.RetryAfter != "" {
			w.Header().Set("Retry-After", he.RetryAfter)
		}
		WriteError(w, he.Status, he.Code, he.Msg)
	})
}

// WriteError writes the contract's JSON error shape.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	WriteJSON(w, status, contract.Error{Error: contract.ErrorBody{Code: code, Message: msg}})
}

// WriteJSON writes v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteCreated answers an idempotent create with v: 201 Created when the
// call created it, 200 OK when it was a retry that found it stored, so that
// a client can tell the two apart.
func WriteCreated(w http.ResponseWriter, created bool, v any) {
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	WriteJSON(w, status, v)
}

// DefaultBodyTimeout is how long a client may take to send a request's
// body by default (BodyDeadline, ReadBody).
const DefaultBodyTimeout = 30 * time.Second

// BodyTimeout is the bound on a body's time that timeout gives
// BodyDeadline: timeout, or DefaultBodyTimeout for 0 (or less).
func BodyTimeout(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return DefaultBodyTimeout
	}
	return timeout
}

// bodyDeadlineKey marks a request whose body BodyDeadline bounds.
type bodyDeadlineKey struct{}

// BodyDeadline bounds the time a client may take to send a request's body,
// as http.Server.ReadHeaderTimeout bounds its headers, so that a client
// that trickles a body cannot hold a connection (and a buffer)
// indefinitely. The deadline, timeout from the request's start (0:
// DefaultBodyTimeout), is on the connection's reads: it ends the handler's
// reads of the body, and the server's own read of what the handler left
// unread (a request refused before its body was read), after which the
// connection is closed. It is lifted once the body has been read to its
// end, so that a response streamed after it (the gateway's, an event
// stream) is not cut off, and a request without a body gets none. Wrapping
// a handler twice changes nothing: the outer deadline holds.
func BodyDeadline(timeout time.Duration, next http.Handler) http.Handler {
	timeout = BodyTimeout(timeout)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.Context().Value(bodyDeadlineKey{}) != nil {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(timeout)) != nil {
			next.ServeHTTP(w, r) // a writer without deadlines (a test's recorder)
			return
		}
		// A copy of the request: the server's own (which it discards the
		// rest of the body from) keeps its body.
		in := r.WithContext(context.WithValue(r.Context(), bodyDeadlineKey{}, true))
		in.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		next.ServeHTTP(w, in)
	})
}

// deadlineBody lifts its connection's read deadline when it reaches the
// end of the body. It is read by one goroutine at a time, as every
// request body is.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// ReadBody reads at most max bytes of r's body; a longer body is a 413,
// refused before a byte of it is read when its Content-Length says so. A
// body of a declared length is read into a buffer that grows as it
// arrives and never past that length. A request that BodyDeadline bounds
// is read within its deadline; any other within DefaultBodyTimeout from
// now. A body that could not be read whole (too large, too slow, broken)
// also closes the connection after the answer, so that the server does
// not go on reading what is left of it.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		w.Header().Set("Connection", "close")
		return nil, errBodyTooLarge(max)
	}
	rc := http.NewResponseController(w)
	bounded := r.Context().Value(bodyDeadlineKey{}) != nil
	if !bounded {
		_ = rc.SetReadDeadline(time.Now().Add(DefaultBodyTimeout))
	}
	b, err := readAll(http.MaxBytesReader(w, r.Body, max), r.ContentLength)
	if err != nil {
		// The deadline stays: the server reads no more of this body than
		// it allows.
		w.Header().Set("Connection", "close")
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errBodyTooLarge(max)
		}
		return nil, &Error{Status: http.StatusBadRequest, Code: contract.CodeBadRequest, Msg: "the request body could not be read: it was broken off, or came too slowly", Err: err}
	}
	if !bounded {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return b, nil
}

func errBodyTooLarge(max int64) *Error {
	return Errorf(http.StatusRequestEntityTooLarge, contract.CodeTooLarge, "the request body is larger than %d bytes", max)
}

// readAll reads body to its end; one of a declared length n (not
// negative) into a buffer that never grows past n bytes, where io.ReadAll's
// doubling could allocate up to twice the body. The buffer grows as bytes
// arrive rather than being made whole at once, so that a request that
// declares a large body and sends nothing costs no more than one that
// declares a small one.
func readAll(body io.Reader, n int64) ([]byte, error) {
	if n < 0 {
		return io.ReadAll(body)
	}
	b := make([]byte, 0, min(n, readStep))
	for int64(len(b)) < n {
		if len(b) == cap(b) {
			grown := make([]byte, len(b), min(n, max(2*int64(cap(b)), readStep)))
			copy(grown, b)
			b = grown
		}
		k, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+k]
		if err == io.EOF && int64(len(b)) == n {
			return b, nil
		}
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
	}
	if err := AtEnd(body); err != nil {
		return nil, err
	}
	return b, nil
}

// AtEnd checks that body, read to its declared Content-Length, ends
// there: the server ends a body at that length, so one more read sees the
// end (and lifts BodyDeadline's deadline); anything else is an error.
func AtEnd(body io.Reader) error {
	var one [1]byte
	if k, err := body.Read(one[:]); k > 0 || err != io.EOF {
		if err == nil || err == io.EOF {
			err = errors.New("the body is longer than its Content-Length")
		}
		return err
	}
	return nil
}

// readStep is the buffer a body of a declared length starts with, and
// the least it grows by.
const readStep = 64 << 10

// uploadRetryAfter is what a body refused for want of room is told to
// wait, in seconds: the room is held only while a body is read and passed
// on.
const uploadRetryAfter = "1"

// ReadBodyIn reads r's body as ReadBody does, within room (bodyroom): for
// key (the caller) it takes room before a byte is read, all of a declared
// Content-Length, or max for a body of unknown length, and holds it until
// the caller calls release, once done with the bytes (release may be
// called more than once). A body that finds no room is refused unread,
// with Retry-After: 429 when key's own share is held, 503 when all the
// room is; what counts as an upload in the messages is what room bounds.
func ReadBodyIn(w http.ResponseWriter, r *http.Request, max int64, room *bodyroom.Room, key string) (body []byte, release func(), err error) {
	nothing := func() {}
	if r.ContentLength > max {
		w.Header().Set("Connection", "close")
		return nil, nothing, errBodyTooLarge(max)
	}
	n := r.ContentLength
	if n < 0 {
		n = max
	}
	if err := room.Take(key, n); err != nil {
		w.Header().Set("Connection", "close")
		total, share := room.Limits()
		if errors.Is(err, bodyroom.ErrKeyFull) {
			return nil, nothing, &Error{Status: http.StatusTooManyRequests, Code: contract.CodeTooManyUploads, RetryAfter: uploadRetryAfter, Err: err,
				Msg: fmt.Sprintf("your uploads under way hold as many bytes as one user's may at once (%s): send this one when one of them is done", sizeOf(share))}
		}
		return nil, nothing, &Error{Status: http.StatusServiceUnavailable, Code: contract.CodeTooManyUploads, RetryAfter: uploadRetryAfter, Err: err,
			Msg: fmt.Sprintf("the server holds as many uploaded bytes as it may at once (%s): send this again in a moment", sizeOf(total))}
	}
	var once sync.Once
	release = func() { once.Do(func() { room.Give(key, n) }) }
	body, err = ReadBody(w, r, max)
	if err != nil {
		release()
		return nil, nothing, err
	}
	return body, release, nil
}

// sizeOf says n bytes for people: in MiB when a whole number of them.
func sizeOf(n int64) string {
	if n > 0 && n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// DecodeJSON decodes body into v strictly: unknown fields, trailing data, a
// key twice in one object and a key in another case than its field's
// ("ID" for "id") are errors, so a misspelt or ambiguous field is reported,
// naming it, rather than ignored or silently chosen. Every JSON request
// body of the APIs is decoded here.
func DecodeJSON(body []byte, v any) error {
	if len(body) == 0 {
		return Errorf(http.StatusBadRequest, contract.CodeBadRequest, "the request body is empty; a JSON object is required")
	}
	if err := DecodeStrict(body, v); err != nil {
		if ke, ok := errors.AsType[*keyError](err); ok {
			return &Error{Status: http.StatusBadRequest, Code: contract.CodeBadRequest, Msg: ke.Error()}
		}
		if errors.Is(err, errTrailingData) {
			return Errorf(http.StatusBadRequest, contract.CodeBadRequest, "the request body has data after the JSON object")
		}
		return Errorf(http.StatusBadRequest, contract.CodeBadRequest, "the request body is not valid JSON for this endpoint: %v", err)
	}
	return nil
}

// errTrailingData is DecodeStrict's error for data after the value.
var errTrailingData = errors.New("trailing data after the JSON value")

// DecodeStrict decodes one JSON value from data into v as DecodeJSON does
// (unknown fields, trailing data, a key twice in an object and a key in
// another case than its field's are all errors), for input that is not a
// request body: the operator's configuration files.
func DecodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Only the end of the data may follow. (dec.More reports false for a
	// stray '}' or ']', so it cannot be the check.)
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errTrailingData
	}
	return checkKeys(data, reflect.TypeOf(v))
}

// invalid is the answer to a value that breaks a rule.
func invalid(fe *contract.FieldError) *Error {
	status := http.StatusBadRequest
	if fe.Code == contract.CodeTooLarge {
		status = http.StatusRequestEntityTooLarge
	}
	code := fe.Code
	if code == "" {
		code = contract.CodeBadRequest
	}
	return &Error{Status: status, Code: code, Msg: fe.Error()}
}

// ID validates a path id, answering 400 with what is wrong.
func ID(kind, id string) error {
	if err := contract.ValidateID(kind, id); err != nil {
		return &Error{Status: http.StatusBadRequest, Code: contract.CodeInvalidID, Msg: err.Error()}
	}
	return nil
}

// ReplayPoint reads where an event stream request resumes: the sequence
// number in Last-Event-ID, else in ?after=, else 0. Both must be
// non-negative integers.
func ReplayPoint(r *http.Request) (int64, error) {
	v := r.Header.Get("Last-Event-ID")
	name := "Last-Event-ID"
	if v == "" {
		v, name = r.URL.Query().Get("after"), "after"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, Errorf(http.StatusBadRequest, contract.CodeBadRequest, "%s must be a non-negative integer sequence number", name)
	}
	return n, nil
}

// MethodNotAllowed answers 405 in the contract's error shape, naming the
// allowed methods. Register it on a known path without a method, so that a
// catch-all "/" does not turn a wrong method into a 404.
func MethodNotAllowed(logger *slog.Logger, allow ...string) http.Handler {
	list := strings.Join(allow, ", ")
	return Handle(logger, func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Allow", list)
		return Errorf(http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed, "method %s is not allowed here; use %s", r.Method, list)
	})
}

// LoopbackHost reports whether a request's Host (or an Origin's host) names
// the loopback interface: 127.0.0.0/8, ::1 or localhost, with any port.
func LoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LocalOnly guards an API that trusts whoever reaches it on loopback (talkide
// dev acts as one user without credentials). A web page the developer opens
// can reach loopback too, so it refuses: a Host that is not loopback (DNS
// rebinding), an Origin that is not loopback (a cross-site request), and a
// body that is neither JSON nor application/octet-stream (an attachment's
// bytes): a page can send the other types without a preflight.
func LocalOnly(r *http.Request) error {
	if err := loopbackHost(r); err != nil {
		return err
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !LoopbackHost(u.Host) {
			return Errorf(http.StatusForbidden, contract.CodeForbidden, "cross-origin requests are refused")
		}
	}
	if r.Method == http.MethodPost && r.ContentLength != 0 {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" && mt != "application/octet-stream" {
			return Errorf(http.StatusUnsupportedMediaType, contract.CodeBadRequest, "the request body must be sent as Content-Type: application/json")
		}
	}
	return nil
}

func loopbackHost(r *http.Request) error {
	if !LoopbackHost(r.Host) {
		return Errorf(http.StatusForbidden, contract.CodeForbidden, "this API answers only requests addressed to a loopback host")
	}
	return nil
}

// LoopbackOnly serves next only to requests whose Host names the loopback
// interface, and answers any other 403 in the contract's error shape. It
// guards what a server bound to loopback serves without credentials
// (/metrics, /healthz): a web page the developer opens can reach loopback
// through a host name of its own that it rebinds to 127.0.0.1, and its
// requests then name that host, never a loopback one. The Origin and body
// rules of LocalOnly are not needed there: such a page can read nothing
// cross-origin, and these endpoints change nothing.
func LoopbackOnly(logger *slog.Logger, next http.Handler) http.Handler {
	refuse := Handle(logger, func(w http.ResponseWriter, r *http.Request) error { return loopbackHost(r) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !LoopbackHost(r.Host) {
			refuse.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// CanonicalPath reports whether a request's escaped path (URL.EscapedPath)
// is the one net/http.ServeMux would route it by: rooted, without empty,
// "." or ".." segments. A ServeMux answers any other path with a redirect
// to its cleaned form, which may lie outside the prefix the request was
// addressed to (a browser API path that leads into the gateway's, or out of
// it); the APIs answer 400 instead.
func CanonicalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// NonCanonicalPath is the 400 answer to a path CanonicalPath refuses.
func NonCanonicalPath() *Error {
	return Errorf(http.StatusBadRequest, contract.CodeBadRequest,
		"the request path is not canonical: it has an empty, '.' or '..' segment")
}
