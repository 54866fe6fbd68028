package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/bodyroom"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/sse"
)

// Handler returns the worker's HTTP API: the signed /v1 commands and the
// unsigned /healthz, which reveals nothing.
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	// The commands about one conversation are routed to the replica that
	// holds it (or should); the workspace and the attachments live on the
	// shared volume, and any replica serves them.
	mux.Handle("POST "+contract.SessionsPath, w.routed(bodyConversation, w.handleCreate))
	mux.Handle("GET "+contract.SessionsPath, w.signed(w.handleRunning))
	mux.Handle("GET "+contract.SessionPath, w.routed(pathConversation, w.handleState))
	mux.Handle("POST "+contract.MessagesPath, w.routed(pathConversation, w.handleSend))
	mux.Handle("GET "+contract.StreamPath, w.routed(pathConversation, w.handleStream))
	mux.Handle("POST "+contract.InterruptPath, w.routed(pathConversation, w.handleInterrupt))
	w.registerWorkspace(mux)
	// An attached file's body is ten times a command's: the bytes of those
	// held at once have a bound of their own (Options.UploadMemory).
	mux.Handle("POST "+contract.AttachmentsPath, w.verified(contract.MaxAttachmentBytes, w.uploads, nil, w.handleAttach))
	mux.HandleFunc("GET "+contract.HealthPath, func(rw http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(rw, http.StatusOK, map[string]string{"status": "ok"})
	})
	// A known path with another method is a 405 in the contract's error
	// shape; without these, "/" below would answer 404.
	for path, allow := range map[string]string{
		contract.SessionsPath:    http.MethodGet + ", " + http.MethodPost,
		contract.SessionPath:     http.MethodGet,
		contract.MessagesPath:    http.MethodPost,
		contract.StreamPath:      http.MethodGet,
		contract.InterruptPath:   http.MethodPost,
		contract.HealthPath:      http.MethodGet,
		contract.AttachmentsPath: http.MethodPost,
	} {
		mux.Handle(path, httpapi.MethodNotAllowed(w.log, allow))
	}
	mux.Handle("/", httpapi.Handle(w.log, func(http.ResponseWriter, *http.Request) error {
		return httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such endpoint")
	}))
	return mux
}

// streamPattern is the event stream's: a stream lasts as long as a
// browser follows the conversation, and is no step of a turn, so it gets
// no span.
const streamPattern = "GET " + contract.StreamPath

type signedHandler func(rw http.ResponseWriter, r *http.Request, body []byte) error

// signed reads the bounded body and verifies X-Worker-Token over it before
// the handler sees anything.
func (w *Worker) signed(h signedHandler) http.Handler {
	return w.verified(contract.MaxCommandBody, nil, nil, h)
}

// conversationOf names the conversation a command is about, for routing;
// create says the command may create it. An id it cannot find or that is
// not valid is "": the handler answers for it.
type conversationOf func(r *http.Request, body []byte) (id string, create bool)

func pathConversation(r *http.Request, _ []byte) (string, bool) { return r.PathValue("id"), false }

func bodyConversation(_ *http.Request, body []byte) (string, bool) {
	var req contract.CreateSessionRequest
	if json.Unmarshal(body, &req) != nil || contract.ValidateConversationID(req.ConversationID) != nil {
		return "", false
	}
	return req.ConversationID, true
}

// routed is signed for a command about one conversation, which another
// replica may serve (route.go): only once its signature has verified is
// it forwarded, so that no replica relays what the control-plane did not
// sign.
func (w *Worker) routed(of conversationOf, h signedHandler) http.Handler {
	return w.verified(contract.MaxCommandBody, nil, of, h)
}

// verified reads the bounded body (within room, when it is not nil),
// verifies the signature over it, and then serves the command with h, or,
// when of names its conversation and another replica should serve it,
// forwards it there.
func (w *Worker) verified(max int64, room *bodyroom.Room, of conversationOf, h signedHandler) http.Handler {
	return httpapi.Handle(w.log, func(rw http.ResponseWriter, r *http.Request) error {
		body, release, err := httpapi.ReadBodyIn(rw, r, max, room, "")
		if err != nil {
			return err
		}
		defer release()
		if _, err := w.verifier.Verify(r, body); err != nil {
			return &httpapi.Error{Status: http.StatusUnauthorized, Code: contract.CodeUnauthorized,
				Msg: "the command's X-Worker-Token signature is missing, invalid, expired or replayed", Err: err}
		}
		if id := r.PathValue("id"); strings.Contains(r.Pattern, "{id}") {
			if err := httpapi.ID("conversation id", id); err != nil {
				return err
			}
		}
		w.commands.Add(1)
		if w.scfg.tracer != nil && r.Pattern != streamPattern {
			// Signed by the control-plane: its trace goes on here. The
			// traceparent is not under the signature; what a forger could
			// do with it is mislabel a span, and a forger cannot get here.
			ctx, span := w.scfg.tracer.Start(observe.Continue(r.Context(), r.Header), r.Pattern,
				trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(observe.Tenant.String(w.scfg.tenant), observe.Env.String(w.scfg.env)))
			defer span.End()
			if id := r.PathValue("id"); id != "" { // validated above
				span.SetAttributes(observe.Conversation.String(id))
			}
			r = r.WithContext(ctx)
		}
		err = w.serveRouted(rw, r, body, of, h)
		switch {
		case errors.Is(err, errShuttingDown):
			return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: contract.CodeShuttingDown,
				Msg: "the worker is shutting down; retry shortly", RetryAfter: shuttingDownRetryAfter}
		case errors.Is(err, sessionstore.ErrLeaseHeld):
			w.elsewhere.Add(1)
			// During a rolling update another replica may still own the
			// conversation; it releases it when its turns are done.
			return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: contract.CodeSessionElsewhere,
				Msg: "another worker replica owns this conversation right now; retry shortly", RetryAfter: "1", Err: err}
		}
		return err
	})
}

// serveRouted serves a verified command here or forwards it: see route.
// A lease taken elsewhere between the look and the open here is forwarded
// to its holder too, once: the handlers meet it before writing anything.
func (w *Worker) serveRouted(rw http.ResponseWriter, r *http.Request, body []byte, of conversationOf, h signedHandler) error {
	local := func() error { return h(rw, r, body) }
	if of == nil || w.router == nil {
		return local()
	}
	id, create := of(r, body)
	if id == "" {
		return local()
	}
	if done, err := w.route(rw, r, body, id, create, local); done {
		return err
	}
	err := local()
	var held *sessionstore.LeaseHolderError
	if errors.As(err, &held) && held.Addr != "" && held.Addr != w.router.addr && held.Holder != w.router.replicas.Holder() &&
		r.Header.Get(ForwardedHeader) == "" {
		return w.forward(rw, r, body, held.Addr, ForwardHolder, nil)
	}
	return err
}

func (w *Worker) lookup(ctx context.Context, id string) (*session, error) {
	s, _, err := w.session(ctx, id, "", false)
	if errors.Is(err, sessionstore.ErrNotFound) {
		return nil, httpapi.Errorf(http.StatusNotFound, contract.CodeNotFound, "no session for conversation %s", id)
	}
	return s, err
}

func (w *Worker) handleCreate(rw http.ResponseWriter, r *http.Request, body []byte) error {
	var req contract.CreateSessionRequest
	if err := httpapi.DecodeJSON(body, &req); err != nil {
		return err
	}
	if err := httpapi.ID("conversation id", req.ConversationID); err != nil {
		return err
	}
	if req.UserID != "" {
		if err := httpapi.ID("user id", req.UserID); err != nil {
			return err
		}
	}
	s, created, err := w.session(r.Context(), req.ConversationID, req.UserID, true)
	if err != nil {
		return err
	}
	st := s.state()
	st.Created = created
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.log.Info("session created", "conversation", s.id)
	}
	httpapi.WriteJSON(rw, status, st)
	return nil
}

// handleRunning lists the sessions whose turn runs. A session still being
// opened from disk runs nothing yet.
// Among replicas, the one asked asks its peers too (route.go): the
// control-plane's one call answers for the whole tenant-env.
func (w *Worker) handleRunning(rw http.ResponseWriter, r *http.Request, _ []byte) error {
	open := w.openSessions()
	out := contract.RunningSessions{Sessions: []contract.SessionState{}}
	for _, s := range open {
		st := s.state()
		if st.Status != contract.StatusRunning {
			continue
		}
		if len(out.Sessions) == contract.MaxRunningSessions {
			out.Truncated = true
			break
		}
		out.Sessions = append(out.Sessions, st)
	}
	if w.router != nil && r.Header.Get(ForwardedHeader) == "" {
		w.peersRunning(r, &out)
	}
	httpapi.WriteJSON(rw, http.StatusOK, out)
	return nil
}

func (w *Worker) handleState(rw http.ResponseWriter, r *http.Request, _ []byte) error {
	s, err := w.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(rw, http.StatusOK, s.state())
	return nil
}

func (w *Worker) handleSend(rw http.ResponseWriter, r *http.Request, body []byte) error {
	var req contract.SendMessageRequest
	if err := httpapi.DecodeJSON(body, &req); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	// Full: refused before the session is opened (its files and its
	// lease), which under overload is what would run out.
	if w.gate.full() {
		return w.errWorkerBusy(rw)
	}
	var resp contract.SendMessageResponse
	var err error
	for range 2 {
		var s *session
		if s, err = w.lookup(r.Context(), r.PathValue("id")); err != nil {
			return err
		}
		if resp, err = s.send(r.Context(), req); !errors.Is(err, errSessionClosed) {
			break
		}
		// Closed between the lookup and the send: dropped from the open
		// sessions already, so the next lookup opens it anew.
	}
	var running errTurnRunning
	switch {
	case errors.Is(err, errBusy):
		return w.errWorkerBusy(rw)
	case errors.As(err, &running):
		return httpapi.Errorf(http.StatusConflict, contract.CodeTurnRunning, "turn %s is still running; wait for it or interrupt it", running.turnID)
	case errors.Is(err, errShuttingDown):
		rw.Header().Set("Retry-After", shuttingDownRetryAfter)
		return httpapi.Errorf(http.StatusServiceUnavailable, contract.CodeShuttingDown, "the worker is shutting down; retry shortly")
	case err != nil:
		return err
	}
	status := http.StatusAccepted
	if resp.Duplicate {
		status = http.StatusOK
	}
	httpapi.WriteJSON(rw, status, resp)
	return nil
}

// shuttingDownRetryAfter is what a draining replica tells a sender: it
// hands each conversation over as soon as that conversation's turn has
// ended, so the command sent again finds the next holder within a second
// or two (a replica that is alone in its env is replaced by a pod that
// takes some seconds to start; a retry a second is cheap meanwhile).
const shuttingDownRetryAfter = "1"

// busyRetryAfter is what a refused sender is told to wait: turns take
// seconds, so a slot is likely free by then.
const busyRetryAfter = "2"

// errWorkerBusy refuses a message beyond the bound on running turns.
func (w *Worker) errWorkerBusy(rw http.ResponseWriter) error {
	w.refusedBusy.Add(1)
	rw.Header().Set("Retry-After", busyRetryAfter)
	return httpapi.Errorf(http.StatusServiceUnavailable, contract.CodeWorkerBusy,
		"this tenant-env's worker is running the most turns it takes at once (%d); the message was not sent: send it again in a few seconds", w.gate.max)
}

func (w *Worker) handleInterrupt(rw http.ResponseWriter, r *http.Request, _ []byte) error {
	s, err := w.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	resp, err := s.interrupt(ctx)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(rw, http.StatusOK, resp)
	return nil
}

// handleStream sends the events after the replay point, then the live tail.
// A subscriber that falls behind is dropped by the producer and catches up
// from the log, so it never loses an event and never slows the turn.
func (w *Worker) handleStream(rw http.ResponseWriter, r *http.Request, _ []byte) error {
	after, err := httpapi.ReplayPoint(r)
	if err != nil {
		return err
	}
	s, err := w.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	flusher, err := sse.Begin(rw)
	if err != nil {
		return err
	}

	last := after
	send := func(ev contract.Event) error {
		if ev.Seq <= last {
			return nil
		}
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if err := sse.Write(rw, strconv.FormatInt(ev.Seq, 10), ev.Kind, data); err != nil {
			return err
		}
		last = ev.Seq
		return nil
	}
	heartbeat := time.NewTicker(w.opts.Heartbeat)
	defer heartbeat.Stop()
	for {
		sub := s.subscribe()
		if err := s.store.ReadEvents(last, send); err != nil {
			s.unsubscribe(sub)
			return nil // the client has gone or the log is unreadable; the client reconnects
		}
		flusher.Flush()
	live:
		for {
			select {
			case <-r.Context().Done():
				s.unsubscribe(sub)
				return nil
			case <-heartbeat.C:
				if err := sse.WriteComment(rw, "heartbeat"); err != nil {
					s.unsubscribe(sub)
					return nil
				}
				flusher.Flush()
			case ev, ok := <-sub.ch:
				if !ok {
					if sub.lagged {
						break live // catch up from the log
					}
					return nil // session closed: the worker is shutting down
				}
				if err := send(ev); err != nil {
					s.unsubscribe(sub)
					return nil
				}
				// Drain what is already queued before flushing once.
				for n := len(sub.ch); n > 0; n-- {
					ev, ok := <-sub.ch
					if !ok {
						break
					}
					if err := send(ev); err != nil {
						s.unsubscribe(sub)
						return nil
					}
				}
				flusher.Flush()
			}
		}
	}
}
