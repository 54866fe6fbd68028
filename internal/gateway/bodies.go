package gateway

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/talkide/platform/internal/bodyroom"
	"github.com/talkide/platform/internal/httpapi"
)

// DefaultMaxBuffered is the default bound on the bytes of request bodies
// the gateway holds in memory at once, across all requests: four bodies
// of DefaultMaxBody, or some hundreds of a long conversation's calls.
const DefaultMaxBuffered = 128 << 20

// bodyRetryAfter is what a request refused for want of room is told to
// wait, in seconds: bodies are held only until the upstream has them.
const bodyRetryAfter = "1"

// bodyStep is how much room a body of unknown length takes at a time.
const bodyStep = 64 << 10

// heldBody is a request body in memory, counted in the gateway's room
// for bodies (bodyroom) until release, which gives its buffer back to its
// pool (or to the garbage collector) and its room back. The proxy's upstream
// request reads it through reader and, for a retry on a fresh connection,
// GetBody; both fail after release.
type heldBody struct {
	room *bodyroom.Room

	mu    sync.Mutex
	b     []byte // guarded by mu; nil once released
	size  int    // guarded by mu; len(b), kept after release
	taken int64  // guarded by mu; room taken for b
}

// release gives the body's room back and forgets its bytes; it is
// idempotent.
func (h *heldBody) release() {
	if h == nil {
		return
	}
	h.mu.Lock()
	n, b := h.taken, h.b
	h.b, h.taken = nil, 0
	h.mu.Unlock()
	h.room.Give("", n)
	// The readers of the body check under h.mu that it is held, so
	// none reads b after this.
	putBuffer(b)
}

// len is the body's size, also after release.
func (h *heldBody) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.size
}

// reader returns a reader of the body from its start.
func (h *heldBody) reader() io.ReadCloser { return &heldReader{h: h} }

func (h *heldBody) getBody() (io.ReadCloser, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b == nil {
		return nil, errBodyReleased
	}
	return h.reader(), nil
}

var errBodyReleased = errors.New("gateway: request body already released")

// heldReader reads a heldBody. It locks per Read: the transport may still
// be writing the body (an upstream that answered before reading all of
// it) when the response's arrival releases it.
type heldReader struct {
	h   *heldBody
	off int
}

func (r *heldReader) Read(p []byte) (int, error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if r.off >= r.h.size {
		// The transport reads once more after the last byte, to see the
		// end, and may do so after the response released the body.
		return 0, io.EOF
	}
	if r.h.b == nil {
		return 0, errBodyReleased
	}
	n := copy(p, r.h.b[r.off:])
	r.off += n
	return n, nil
}

func (r *heldReader) Close() error { return nil }

// errBodyTooLarge is the answer to a body larger than MaxBody: made when
// needed, not for every request.
func errBodyTooLarge() *httpError {
	return &httpError{Status: http.StatusRequestEntityTooLarge, Type: errTooLarge, Msg: "request body too large"}
}

// readBody reads the whole request body into memory, bounded by maxBody
// and, in time, by BodyTimeout, within the room its bodies have. A
// body that declares its length takes room for all of it before a byte
// is read, and is refused before it is read when there is none; a body of
// unknown length takes room as its buffer grows. Room is taken for the
// buffer's capacity (bodyCap), so the room counts what is allocated.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) (*heldBody, *httpError) {
	noRoom := func() *httpError {
		w.Header().Set("Retry-After", bodyRetryAfter)
		return &httpError{Status: http.StatusServiceUnavailable, Type: errOverloaded,
			Msg: "the gateway is busy with other requests' bodies: retry shortly", Err: bodyroom.ErrFull}
	}
	// Whatever is left of a body not read whole is not read: the
	// connection closes after the answer (the body's deadline,
	// BodyDeadline, stays).
	unread := func() { w.Header().Set("Connection", "close") }
	if r.ContentLength > g.maxBody {
		unread()
		return nil, errBodyTooLarge()
	}
	h := &heldBody{room: g.bodies}
	fail := func(e *httpError) (*heldBody, *httpError) {
		unread()
		h.release()
		return nil, e
	}
	body := http.MaxBytesReader(w, r.Body, g.maxBody)
	readErr := func(err error) *httpError {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errBodyTooLarge()
		}
		return &httpError{Status: http.StatusBadRequest, Type: errInvalidRequest, Msg: "could not read request body", Err: err}
	}
	if r.ContentLength >= 0 {
		n := r.ContentLength
		c := bodyCap(n)
		if g.bodies.Take("", c) != nil {
			return fail(noRoom())
		}
		h.taken = c
		buf := getBuffer(c)[:n]
		if _, err := io.ReadFull(body, buf); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fail(readErr(err))
		}
		if err := httpapi.AtEnd(body); err != nil {
			return fail(readErr(err))
		}
		h.b, h.size = buf, len(buf)
		return h, nil
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			// Room for the new buffer first; the old one is given back
			// once copied.
			grown := min(max(2*int64(cap(buf)), bodyStep), g.maxBody+1)
			if grown <= int64(cap(buf)) {
				return fail(errBodyTooLarge())
			}
			if g.bodies.Take("", grown) != nil {
				return fail(noRoom())
			}
			nb := append(getBuffer(grown), buf...)
			g.bodies.Give("", h.taken)
			putBuffer(buf)
			buf, h.taken = nb, grown
		}
		k, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err == io.EOF {
			h.b, h.size = buf, len(buf)
			return h, nil
		}
		if err != nil {
			return fail(readErr(err))
		}
	}
}
