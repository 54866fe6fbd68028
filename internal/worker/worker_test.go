package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/replicaset"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/sessionstore"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/trust"
)

const (
	testTenant = "acme"
	testEnv    = "dev"
	testKeyID  = "k1"
	// waitFor bounds every wait on a condition.
	waitFor = 10 * time.Second
)

var testKey = []byte("worker-test-command-key-32-bytes!")

// fakeHarness hands every turn to the test, which emits events through it
// and decides how it ends.
type fakeHarness struct {
	turns chan *fakeTurn
}

func newFakeHarness() *fakeHarness { return &fakeHarness{turns: make(chan *fakeTurn, 16)} }

// fakeTurn is one running turn of the fake harness.
type fakeTurn struct {
	*harness.Turn
	ctx     context.Context
	release chan turnEnd // the test ends the turn with what it sends here
	ended   chan string  // "released" or "cancelled", once RunTurn returns
}

type turnEnd struct {
	res harness.Result
	err error
}

func (h *fakeHarness) Name() string { return "fake" }

func (h *fakeHarness) RunTurn(ctx context.Context, t *harness.Turn) (harness.Result, error) {
	ft := &fakeTurn{Turn: t, ctx: ctx, release: make(chan turnEnd, 1), ended: make(chan string, 1)}
	h.turns <- ft
	select {
	case e := <-ft.release:
		ft.ended <- "released"
		return e.res, e.err
	case <-ctx.Done():
		ft.ended <- "cancelled"
		return harness.Result{}, ctx.Err()
	}
}

// next returns the next turn the worker started.
func (h *fakeHarness) next(t *testing.T) *fakeTurn {
	t.Helper()
	return receive(t, h.turns, "the worker started no turn")
}

// receive is the next value from ch; the test fails, with failure, when
// none comes within waitFor.
func receive[T any](t *testing.T, ch <-chan T, failure string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatal(failure)
		var zero T
		return zero
	}
}

func (ft *fakeTurn) finish(stop string) {
	ft.release <- turnEnd{res: harness.Result{StopReason: stop, ModelCalls: 1}}
}

func (ft *fakeTurn) waitEnded(t *testing.T) string {
	t.Helper()
	return receive(t, ft.ended, "the turn did not end")
}

// testWorker is a Worker served on loopback with a fake harness.
type testWorker struct {
	w      *Worker
	h      *fakeHarness
	srv    *httptest.Server
	signer *trust.Signer
	dir    string // holds projects/ (the session store) and workspaces/
}

type workerOpts struct {
	dir       string // reuse a previous worker's directory
	notice    string
	heartbeat time.Duration
	wrap      func(http.Handler) http.Handler
	fsync     func(*os.File) error // the session store's; nil: the real one
	syncRetry backoff.Policy
	logger    *slog.Logger
	keys      *trust.Keyring   // the worker's command keys; nil: testKey alone
	now       func() time.Time // the worker's clock; nil: time.Now
	maxTurns  int              // Options.MaxRunningTurns
	holder    string           // the session store's lease holder; "": test-worker
	tracer    trace.TracerProvider
	// replicas makes the worker one of several on dir: it advertises its
	// address and joins dir/replicas (whose Run the test stands in for).
	replicas      bool
	rebalanceIdle time.Duration
	reporter      *Reporter // Options.Reporter; nil: reports stay in the outbox
	uploadMemory  int64     // Options.UploadMemory
}

func newTestWorker(t testing.TB, o workerOpts) *testWorker {
	t.Helper()
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	if o.holder == "" {
		o.holder = "test-worker"
	}
	// Unstarted: a replica's address is in its leases from the first.
	srv := httptest.NewUnstartedServer(nil)
	var addr string
	var replicas *replicaset.Registry
	if o.replicas {
		addr = "http://" + srv.Listener.Addr().String()
		var err error
		if replicas, err = replicaset.New(filepath.Join(o.dir, "replicas"), o.holder, &replicaset.Options{Interval: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	sessions, err := sessionstore.New(filepath.Join(o.dir, "projects"), &sessionstore.Options{Holder: o.holder, Addr: addr, Fsync: o.fsync})
	if err != nil {
		t.Fatal(err)
	}
	h := newFakeHarness()
	w, err := New(testTenant, testEnv, CommandKey{ID: testKeyID, Key: testKey}, sessions, filepath.Join(o.dir, "workspaces"), h, &Options{
		WorkerID:        "worker-test",
		Notices:         notices(o.notice),
		Heartbeat:       o.heartbeat,
		SyncRetry:       o.syncRetry,
		Logger:          o.logger,
		CommandKeys:     o.keys,
		Now:             o.now,
		MaxRunningTurns: o.maxTurns,
		TracerProvider:  o.tracer,
		Replicas:        replicas, Addr: addr, RebalanceIdle: o.rebalanceIdle,
		Reporter: o.reporter, UploadMemory: o.uploadMemory,
	})
	if err != nil {
		t.Fatal(err)
	}
	var handler http.Handler = w.Handler()
	if o.wrap != nil {
		handler = o.wrap(handler)
	}
	srv.Config.Handler = handler
	srv.Start()
	tw := &testWorker{
		w: w, h: h, srv: srv, dir: o.dir,
		signer: &trust.Signer{Direction: trust.ToWorker, Tenant: testTenant, Env: testEnv, KeyID: testKeyID, Key: testKey, Now: o.now},
	}
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		// No grace: interrupt whatever still runs, which also ends streams.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		tw.w.Shutdown(ctx)
	})
	return tw
}

// request returns a signed request; body may be nil.
func (tw *testWorker) request(t testing.TB, ctx context.Context, method, path string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, tw.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tw.signer.Sign(req, body)
	return req
}

// call sends a signed command; in is JSON-encoded unless it is []byte.
func (tw *testWorker) call(t testing.TB, method, path string, in any) (*http.Response, []byte) {
	t.Helper()
	var body []byte
	switch v := in.(type) {
	case nil:
	case []byte:
		body = v
	default:
		var err error
		if body, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return send(t, tw.request(t, ctx, method, path, body))
}

func send(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	return roundtrip.With(t, http.DefaultClient, req)
}

// decode decodes b strictly into a T.
func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, b, err)
	}
	return v
}

// wantError checks a response against the contract's error shape.
func wantError(t testing.TB, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status %d, want %d (body %s)", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	e := decode[contract.Error](t, body)
	if e.Error.Code != code || e.Error.Message == "" {
		t.Errorf("error %+v, want code %q", e.Error, code)
	}
}

func (tw *testWorker) create(t testing.TB, conv string) (int, contract.SessionState) {
	t.Helper()
	resp, b := tw.call(t, http.MethodPost, contract.SessionsPath, contract.CreateSessionRequest{ConversationID: conv, UserID: "user-1"})
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("create %s: %d %s", conv, resp.StatusCode, b)
	}
	return resp.StatusCode, decode[contract.SessionState](t, b)
}

func (tw *testWorker) state(t *testing.T, conv string) contract.SessionState {
	t.Helper()
	resp, b := tw.call(t, http.MethodGet, "/v1/sessions/"+conv, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("state %s: %d %s", conv, resp.StatusCode, b)
	}
	return decode[contract.SessionState](t, b)
}

func (tw *testWorker) sendMessage(t *testing.T, conv, cmid, text string) (int, contract.SendMessageResponse) {
	t.Helper()
	resp, b := tw.call(t, http.MethodPost, "/v1/sessions/"+conv+"/messages", contract.SendMessageRequest{ClientMessageID: cmid, Text: text})
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		t.Fatalf("send %s: %d %s", cmid, resp.StatusCode, b)
	}
	return resp.StatusCode, decode[contract.SendMessageResponse](t, b)
}

// startTurn sends a message that starts a turn (202) and returns the answer
// and the turn the harness was given.
func (tw *testWorker) startTurn(t *testing.T, conv, cmid, text string) (contract.SendMessageResponse, *fakeTurn) {
	t.Helper()
	status, sent := tw.sendMessage(t, conv, cmid, text)
	if status != http.StatusAccepted {
		t.Fatalf("send %s to %s: %d, want 202", cmid, conv, status)
	}
	return sent, tw.h.next(t)
}

// streamed is one SSE event as a client received it.
type streamed struct {
	ID   string
	Name string
	Ev   contract.Event
}

type stream struct {
	r      *sse.Reader
	resp   *http.Response
	cancel context.CancelFunc
}

// openStream follows conv's events; query and lastEventID may be empty.
func (tw *testWorker) openStream(t *testing.T, conv, query, lastEventID string) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req := tw.request(t, ctx, http.MethodGet, "/v1/sessions/"+conv+"/stream"+query, nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("stream: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	s := &stream{r: sse.NewReader(resp.Body, 1<<20), resp: resp, cancel: cancel}
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads one event; it returns an error instead of failing so that it
// can run outside the test's goroutine.
func (s *stream) next() (streamed, error) {
	e, err := s.r.Next()
	if err != nil {
		return streamed{}, err
	}
	var ev contract.Event
	if err := json.Unmarshal(e.Data, &ev); err != nil {
		return streamed{}, fmt.Errorf("event data %s: %w", e.Data, err)
	}
	return streamed{ID: e.ID, Name: e.Event, Ev: ev}, nil
}

// until reads events up to and including the first that stop accepts.
func (s *stream) until(stop func(contract.Event) bool) ([]streamed, error) {
	var got []streamed
	for {
		e, err := s.next()
		if err != nil {
			return got, fmt.Errorf("after %d events: %w", len(got), err)
		}
		got = append(got, e)
		if stop(e.Ev) {
			return got, nil
		}
	}
}

func (s *stream) mustUntil(t *testing.T, stop func(contract.Event) bool) []streamed {
	t.Helper()
	got, err := s.until(stop)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	return got
}

func terminal(turnID string) func(contract.Event) bool {
	return func(ev contract.Event) bool { return ev.TurnID == turnID && contract.Terminal(ev.Kind) }
}

func kind(k string) func(contract.Event) bool {
	return func(ev contract.Event) bool { return ev.Kind == k }
}

func seqIs(n int64) func(contract.Event) bool {
	return func(ev contract.Event) bool { return ev.Seq == n }
}

// checkSequence asserts SSE ids equal seqs, names equal kinds, and seqs run
// from first without gaps or repeats.
func checkSequence(t *testing.T, got []streamed, first int64) {
	t.Helper()
	for i, s := range got {
		want := first + int64(i)
		if s.Ev.Seq != want || s.ID != strconv.FormatInt(want, 10) || s.Name != s.Ev.Kind {
			t.Fatalf("event %d: id %q seq %d name %q kind %q; want seq %d", i, s.ID, s.Ev.Seq, s.Name, s.Ev.Kind, want)
		}
	}
}

func kindsOf(got []streamed) []string {
	out := make([]string, len(got))
	for i, s := range got {
		out[i] = s.Ev.Kind
	}
	return out
}

// logEvents reads a session's event log from disk, as a restarted worker
// would. The worker must not hold the session open.
func logEvents(t *testing.T, dir, conv string) []contract.Event {
	t.Helper()
	st, err := sessionstore.New(filepath.Join(dir, "projects"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := st.Inspect(conv)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var evs []contract.Event
	if err := s.ReadEvents(0, func(ev contract.Event) error { evs = append(evs, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	return evs
}

func (tw *testWorker) closing() bool { return tw.w.gate.closing() }

// session returns conv's open session.
func (tw *testWorker) session(t *testing.T, conv string) *session {
	t.Helper()
	tw.w.mu.Lock()
	defer tw.w.mu.Unlock()
	s := tw.w.sessions[conv]
	if s == nil {
		t.Fatalf("session %s is not open", conv)
	}
	return s
}

// subscribers is the number of live subscribers of conv's open session.
func (tw *testWorker) subscribers(conv string) int {
	tw.w.mu.Lock()
	s := tw.w.sessions[conv]
	tw.w.mu.Unlock()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

func TestCreateOrGetIsIdempotent(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	status, first := tw.create(t, "conv-1")
	if status != http.StatusCreated || !first.Created {
		t.Fatalf("first create: %d %+v", status, first)
	}
	want := contract.SessionState{ConversationID: "conv-1", Created: true, Status: contract.StatusIdle, LastSeq: 1, Harness: "fake"}
	if diff := cmp.Diff(want, first, cmpopts.IgnoreFields(contract.SessionState{}, "CreatedAt")); diff != "" || first.CreatedAt.IsZero() {
		t.Errorf("first create (-want +got):\n%s", diff)
	}
	status, again := tw.create(t, "conv-1")
	if status != http.StatusOK || again.Created {
		t.Fatalf("second create: %d %+v", status, again)
	}
	first.Created = false
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("second create (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(first, tw.state(t, "conv-1")); diff != "" {
		t.Errorf("state (-create +get):\n%s", diff)
	}

	// Racing creates: exactly one creates.
	var wg sync.WaitGroup
	statuses := make(chan int, 8)
	for range 8 {
		wg.Go(func() {
			resp, _ := tw.call(t, http.MethodPost, contract.SessionsPath, contract.CreateSessionRequest{ConversationID: "conv-race"})
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	created := 0
	for st := range statuses {
		switch st {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Errorf("racing create: status %d", st)
		}
	}
	if created != 1 {
		t.Errorf("%d racing creates answered 201, want 1", created)
	}
}

func TestSendIsIdempotent(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	status, first := tw.sendMessage(t, "conv-1", "m-1", "hello")
	if status != http.StatusAccepted || first.Duplicate || first.TurnID == "" || first.Seq != 2 {
		t.Fatalf("send: %d %+v", status, first)
	}
	ft := tw.h.next(t)
	if ft.TurnID != first.TurnID || ft.Text != "hello" || ft.ConversationID != "conv-1" || ft.UserID != "user-1" {
		t.Errorf("harness turn %+v", ft.Turn)
	}
	wantDup := first
	wantDup.Duplicate = true
	status, dup := tw.sendMessage(t, "conv-1", "m-1", "hello")
	if status != http.StatusOK {
		t.Errorf("duplicate while running: status %d", status)
	}
	if diff := cmp.Diff(wantDup, dup); diff != "" {
		t.Errorf("duplicate while running (-want +got):\n%s", diff)
	}
	ft.finish("end_turn")
	s := tw.openStream(t, "conv-1", "", "")
	s.mustUntil(t, terminal(first.TurnID))

	// After the turn, a retry still finds the same turn and starts nothing.
	status, dup = tw.sendMessage(t, "conv-1", "m-1", "a different text, same id")
	if diff := cmp.Diff(wantDup, dup); diff != "" || status != http.StatusOK {
		t.Errorf("duplicate after the turn: %d (-want +got):\n%s", status, diff)
	}
	st := tw.state(t, "conv-1")
	if st.Turns != 1 || st.Status != contract.StatusIdle {
		t.Errorf("state %+v, want 1 turn, idle", st)
	}
	counts := map[string]int{}
	for _, ev := range tw.session(t, "conv-1").readAll(t) {
		counts[ev.Kind]++
	}
	if counts[contract.KindUserMessage] != 1 || counts[contract.KindTurnStarted] != 1 || counts[contract.KindTurnFinished] != 1 {
		t.Errorf("event counts %v, want one turn", counts)
	}
}

// readAll returns the session's events from its log.
func (s *session) readAll(t *testing.T) []contract.Event {
	t.Helper()
	var evs []contract.Event
	if err := s.store.ReadEvents(0, func(ev contract.Event) error { evs = append(evs, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestSendWhileRunningConflicts(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	_, first := tw.sendMessage(t, "conv-1", "m-1", "hello")
	ft := tw.h.next(t)
	resp, b := tw.call(t, http.MethodPost, "/v1/sessions/conv-1/messages", contract.SendMessageRequest{ClientMessageID: "m-2", Text: "again"})
	wantError(t, resp, b, http.StatusConflict, contract.CodeTurnRunning)
	if !strings.Contains(string(b), first.TurnID) {
		t.Errorf("the conflict does not name the running turn: %s", b)
	}
	if st := tw.state(t, "conv-1"); st.Status != contract.StatusRunning || st.RunningTurnID != first.TurnID {
		t.Errorf("state %+v", st)
	}
	ft.finish("end_turn")
	// The refused message was not recorded: it can be sent once idle.
	tw.openStream(t, "conv-1", "", "").mustUntil(t, terminal(first.TurnID))
	if status, _ := tw.sendMessage(t, "conv-1", "m-2", "again"); status != http.StatusAccepted {
		t.Errorf("m-2 after the turn: status %d", status)
	}
	tw.h.next(t).finish("end_turn")
}

func TestTurnOutcomes(t *testing.T) {
	tests := map[string]struct {
		end       turnEnd
		interrupt bool
		want      contract.Event // Kind and Finish or Failure
	}{
		"finished": {
			end:  turnEnd{res: harness.Result{StopReason: "end_turn", ModelCalls: 3}},
			want: contract.Event{Kind: contract.KindTurnFinished, Finish: &contract.TurnFinish{StopReason: "end_turn", ModelCalls: 3}},
		},
		"typed failure": {
			end: turnEnd{err: &harness.TurnError{Code: contract.FailRateLimited, Message: "slow down", Retryable: true, HTTPStatus: 429, Err: errors.New("secret cause")}},
			want: contract.Event{Kind: contract.KindTurnFailed, Failure: &contract.TurnFailure{
				Code: contract.FailRateLimited, Message: "slow down", Retryable: true, HTTPStatus: 429}},
		},
		"untyped failure": {
			end: turnEnd{err: errors.New("disk on fire")},
			want: contract.Event{Kind: contract.KindTurnFailed, Failure: &contract.TurnFailure{
				Code: contract.FailInternal, Message: "the worker failed to run the turn", Retryable: true}},
		},
		"interrupted": {
			interrupt: true,
			want: contract.Event{Kind: contract.KindTurnFailed, Failure: &contract.TurnFailure{
				Code: contract.FailInterrupted, Message: "the turn was interrupted", Retryable: true}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tw := newTestWorker(t, workerOpts{})
			tw.create(t, "conv-1")
			_, sent := tw.sendMessage(t, "conv-1", "m-1", "hello")
			ft := tw.h.next(t)
			ft.Emit(contract.Event{Kind: contract.KindTextDelta, Text: "partial"})
			if tc.interrupt {
				resp, b := tw.call(t, http.MethodPost, "/v1/sessions/conv-1/interrupt", nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("interrupt: %d %s", resp.StatusCode, b)
				}
				want := contract.InterruptResponse{ConversationID: "conv-1", TurnID: sent.TurnID, Interrupted: true}
				if diff := cmp.Diff(want, decode[contract.InterruptResponse](t, b)); diff != "" {
					t.Errorf("interrupt (-want +got):\n%s", diff)
				}
				// The interrupt answers once the turn has closed.
				if how := ft.waitEnded(t); how != "cancelled" || ft.ctx.Err() == nil {
					t.Errorf("the harness ended %q; want it to see its context cancelled", how)
				}
			} else {
				ft.release <- tc.end
			}
			got := tw.openStream(t, "conv-1", "", "").mustUntil(t, terminal(sent.TurnID))
			checkSequence(t, got, 1)
			wantKinds := []string{contract.KindSessionCreated, contract.KindUserMessage, contract.KindTurnStarted, contract.KindTextDelta, tc.want.Kind}
			if diff := cmp.Diff(wantKinds, kindsOf(got)); diff != "" {
				t.Fatalf("kinds (-want +got):\n%s", diff)
			}
			for _, e := range got[1:] {
				if e.Ev.TurnID != sent.TurnID || e.Ev.ConversationID != "conv-1" || e.Ev.Time.IsZero() {
					t.Errorf("event %+v lacks the worker's fields", e.Ev)
				}
			}
			last := got[len(got)-1].Ev
			if diff := cmp.Diff(tc.want.Failure, last.Failure); diff != "" {
				t.Errorf("failure (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want.Finish, last.Finish, cmpopts.IgnoreFields(contract.TurnFinish{}, "DurationMS")); diff != "" {
				t.Errorf("finish (-want +got):\n%s", diff)
			}
			if st := tw.state(t, "conv-1"); st.Status != contract.StatusIdle {
				t.Errorf("state after the turn %+v", st)
			}
		})
	}
}

func TestInterruptWhenIdle(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	resp, b := tw.call(t, http.MethodPost, "/v1/sessions/conv-1/interrupt", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("interrupt: %d %s", resp.StatusCode, b)
	}
	if diff := cmp.Diff(contract.InterruptResponse{ConversationID: "conv-1"}, decode[contract.InterruptResponse](t, b)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// runTurn sends a message, lets the fake emit n text deltas and finishes
// the turn; it returns the turn id.
func (tw *testWorker) runTurn(t *testing.T, conv, cmid string, n int) string {
	t.Helper()
	_, sent := tw.sendMessage(t, conv, cmid, "text of "+cmid)
	ft := tw.h.next(t)
	for i := range n {
		ft.Emit(contract.Event{Kind: contract.KindTextDelta, Text: fmt.Sprintf("%s-%d ", cmid, i)})
	}
	ft.finish("end_turn")
	return sent.TurnID
}

func TestStreamReplay(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	turn := tw.runTurn(t, "conv-1", "m-0", 5)
	all := tw.openStream(t, "conv-1", "", "").mustUntil(t, terminal(turn))
	checkSequence(t, all, 1)

	tests := map[string]struct {
		back        int64 // replay from LastSeq-back
		query       func(after int64) string
		lastEventID func(after int64) string
	}{
		"after query":   {back: 3, query: func(a int64) string { return "?after=" + strconv.FormatInt(a, 10) }},
		"Last-Event-ID": {back: 4, lastEventID: func(a int64) string { return strconv.FormatInt(a, 10) }},
		"Last-Event-ID wins over after": {
			back:        2,
			query:       func(int64) string { return "?after=1" },
			lastEventID: func(a int64) string { return strconv.FormatInt(a, 10) },
		},
		"from the start": {back: -1, query: func(int64) string { return "?after=0" }},
		"nothing missed": {back: 0, lastEventID: func(a int64) string { return strconv.FormatInt(a, 10) }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			last := tw.state(t, "conv-1").LastSeq
			after := last - tc.back
			if tc.back < 0 {
				after = 0
			}
			var q, id string
			if tc.query != nil {
				q = tc.query(after)
			}
			if tc.lastEventID != nil {
				id = tc.lastEventID(after)
			}
			s := tw.openStream(t, "conv-1", q, id)
			var got []streamed
			if after < last {
				got = s.mustUntil(t, seqIs(last))
			}
			checkSequence(t, got, after+1)
			if int64(len(got)) != last-after {
				t.Fatalf("replayed %d events, want %d", len(got), last-after)
			}
			// Then the live tail, with nothing repeated or skipped.
			turn := tw.runTurn(t, "conv-1", "m-"+strings.ReplaceAll(name, " ", "-"), 2)
			tail := s.mustUntil(t, terminal(turn))
			checkSequence(t, tail, last+1)
			if tail[0].Ev.Kind != contract.KindUserMessage {
				t.Errorf("live tail starts with %s", tail[0].Ev.Kind)
			}
		})
	}
}

func TestStreamBadReplayPoint(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	for name, tc := range map[string]struct{ query, lastEventID string }{
		"negative after":     {query: "?after=-1"},
		"non-numeric after":  {query: "?after=abc"},
		"bad Last-Event-ID":  {lastEventID: "seven"},
		"huge Last-Event-ID": {lastEventID: "99999999999999999999"},
	} {
		t.Run(name, func(t *testing.T) {
			req := tw.request(t, context.Background(), http.MethodGet, "/v1/sessions/conv-1/stream"+tc.query, nil)
			if tc.lastEventID != "" {
				req.Header.Set("Last-Event-ID", tc.lastEventID)
			}
			resp, b := send(t, req)
			wantError(t, resp, b, http.StatusBadRequest, contract.CodeBadRequest)
		})
	}
}

// gate makes a stream's writes block while it is held, as a client that
// stops reading makes them block once the socket buffers are full — only
// deterministically, whatever the buffer sizes.
type gate struct{ mu sync.RWMutex }

type gatedWriter struct {
	http.ResponseWriter
	g *gate
}

func (w gatedWriter) Write(p []byte) (int, error) {
	w.g.mu.RLock()
	defer w.g.mu.RUnlock()
	return w.ResponseWriter.Write(p)
}

func (w gatedWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

func (g *gate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stream") {
			rw = gatedWriter{ResponseWriter: rw, g: g}
		}
		next.ServeHTTP(rw, r)
	})
}

func TestSlowSubscriberCatchesUpFromTheLog(t *testing.T) {
	g := &gate{}
	tw := newTestWorker(t, workerOpts{wrap: g.wrap})
	tw.create(t, "conv-1")
	s := tw.openStream(t, "conv-1", "", "")
	_, sent := tw.sendMessage(t, "conv-1", "m-1", "go")
	ft := tw.h.next(t)
	head := s.mustUntil(t, kind(contract.KindTurnStarted))
	if tw.subscribers("conv-1") != 1 {
		t.Fatal("the stream is not subscribed")
	}

	// The client reads nothing while far more than the subscriber's
	// buffer is emitted.
	const n = 3 * subscriberBuffer
	g.mu.Lock()
	for i := range n {
		ft.Emit(contract.Event{Kind: contract.KindTextDelta, Text: fmt.Sprintf("d%d", i)})
	}
	// The producer never waited: it dropped the subscriber instead (once
	// the events were durable and published).
	poll.Until(t, "the slow subscriber is dropped", func() bool { return tw.subscribers("conv-1") == 0 })
	ft.finish("end_turn")
	ft.waitEnded(t)
	g.mu.Unlock()

	rest := s.mustUntil(t, terminal(sent.TurnID))
	got := append(head, rest...)
	checkSequence(t, got, 1)
	var texts []string
	for _, e := range got {
		if e.Ev.Kind == contract.KindTextDelta {
			texts = append(texts, e.Ev.Text)
		}
	}
	if len(texts) != n {
		t.Fatalf("received %d of %d deltas", len(texts), n)
	}
	for i, txt := range texts {
		if txt != fmt.Sprintf("d%d", i) {
			t.Fatalf("delta %d is %q", i, txt)
		}
	}
	// Caught up, the stream follows the live tail again.
	turn := tw.runTurn(t, "conv-1", "m-2", 1)
	checkSequence(t, s.mustUntil(t, terminal(turn)), got[len(got)-1].Ev.Seq+1)
}

func TestConcurrentSubscribersSeeTheSameEvents(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	streams := []*stream{tw.openStream(t, "conv-1", "", ""), tw.openStream(t, "conv-1", "", "")}
	_, sent := tw.sendMessage(t, "conv-1", "m-1", "go")
	ft := tw.h.next(t)

	results := make([][]streamed, len(streams))
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() { results[i], errs[i] = s.until(terminal(sent.TurnID)) })
	}
	for i := range 200 {
		switch i % 50 {
		case 10:
			ft.Emit(contract.Event{Kind: contract.KindToolStarted, Tool: &contract.ToolEvent{ID: "tu" + strconv.Itoa(i), Name: "Bash"}})
		case 20:
			ft.Emit(contract.Event{Kind: contract.KindToolFinished, Tool: &contract.ToolEvent{ID: "tu" + strconv.Itoa(i-10), Name: "Bash"}})
		default:
			ft.Emit(contract.Event{Kind: contract.KindTextDelta, Text: strconv.Itoa(i)})
		}
	}
	ft.finish("end_turn")
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("subscriber %d: %v", i, err)
		}
	}
	checkSequence(t, results[0], 1)
	if len(results[0]) != 1+2+200+1 {
		t.Errorf("%d events", len(results[0]))
	}
	if diff := cmp.Diff(results[0], results[1]); diff != "" {
		t.Errorf("subscribers disagree (-first +second):\n%s", diff)
	}
}

func TestHeartbeatOnIdleStream(t *testing.T) {
	tw := newTestWorker(t, workerOpts{heartbeat: 5 * time.Millisecond})
	tw.create(t, "conv-1")
	// session.created reaches the stream once it is durable; wait for that
	// rather than race the first fsync against the 5 ms heartbeat.
	waitDurable(t, tw.session(t, "conv-1"))
	s := tw.openStream(t, "conv-1", "", "")
	// Read the raw bytes: comments are not events, the SSE reader skips them.
	br := bufio.NewReader(s.resp.Body)
	var raw strings.Builder
	for !strings.Contains(raw.String(), "\n\n: heartbeat\n\n") {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v after %q", err, raw.String())
		}
		raw.WriteString(line)
	}
	if !strings.HasPrefix(raw.String(), "id: 1\nevent: session.created\n") {
		t.Errorf("stream began %q", raw.String())
	}
}

func TestRestartResumesSessions(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	turn := tw.runTurn(t, "conv-1", "m-1", 2)
	before := tw.openStream(t, "conv-1", "", "").mustUntil(t, terminal(turn))
	if err := tw.w.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	tw2 := newTestWorker(t, workerOpts{dir: tw.dir, notice: "model simulator in use"})
	st := tw2.state(t, "conv-1")
	if st.Turns != 1 || st.Status != contract.StatusIdle || st.Harness != "fake" {
		t.Errorf("state after restart %+v", st)
	}
	last := before[len(before)-1].Ev.Seq
	got := tw2.openStream(t, "conv-1", "", strconv.FormatInt(last, 10)).mustUntil(t, kind(contract.KindNotice))
	checkSequence(t, got, last+1)
	if diff := cmp.Diff([]string{contract.KindSessionResumed, contract.KindNotice}, kindsOf(got)); diff != "" {
		t.Fatalf("after restart (-want +got):\n%s", diff)
	}
	if se := got[0].Ev.Session; se == nil || se.Harness != "fake" || se.WorkerID != "worker-test" {
		t.Errorf("session.resumed %+v", got[0].Ev.Session)
	}

	// The client message ids survive the restart.
	status, dup := tw2.sendMessage(t, "conv-1", "m-1", "again")
	if status != http.StatusOK || dup.TurnID != turn {
		t.Errorf("duplicate after restart: %d %+v", status, dup)
	}
	turn2 := tw2.runTurn(t, "conv-1", "m-2", 1)
	if turn2 == turn {
		t.Error("a new turn reused the old turn id")
	}
}

func TestRestartClosesTurnCutOffByCrash(t *testing.T) {
	dir := t.TempDir()
	// A worker crashed mid-turn: its log ends inside the turn.
	st, err := sessionstore.New(filepath.Join(dir, "projects"), &sessionstore.Options{Holder: "crashed-worker"})
	if err != nil {
		t.Fatal(err)
	}
	sess, _, err := st.Create("conv-crash", sessionstore.Meta{Harness: "fake", UserID: "user-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []contract.Event{
		{Kind: contract.KindSessionCreated, Session: &contract.SessionEvent{Harness: "fake"}},
		{Kind: contract.KindUserMessage, TurnID: "t_crashed", ClientMessageID: "m-1", Text: "hi"},
		{Kind: contract.KindTurnStarted, TurnID: "t_crashed"},
		{Kind: contract.KindTextDelta, TurnID: "t_crashed", Text: "half a"},
	} {
		ev.ConversationID = "conv-crash"
		ev.Time = time.Now().UTC()
		if err := sess.AppendEvent(&ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}

	for restart := range 2 {
		tw := newTestWorker(t, workerOpts{dir: dir})
		if st := tw.state(t, "conv-crash"); st.Status != contract.StatusIdle || st.Turns != 1 {
			t.Errorf("restart %d: state %+v", restart, st)
		}
		if err := tw.w.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	evs := logEvents(t, dir, "conv-crash")
	var gotKinds []string
	for _, ev := range evs[4:] {
		gotKinds = append(gotKinds, ev.Kind)
	}
	// Closed once, on the first load; the second load only resumes.
	want := []string{contract.KindSessionResumed, contract.KindTurnFailed, contract.KindSessionResumed}
	if diff := cmp.Diff(want, gotKinds); diff != "" {
		t.Fatalf("events after the crash (-want +got):\n%s", diff)
	}
	failed := evs[5]
	if failed.TurnID != "t_crashed" || failed.Failure == nil || failed.Failure.Code != contract.FailWorkerRestarted || !failed.Failure.Retryable {
		t.Errorf("turn.failed %+v %+v", failed, failed.Failure)
	}
	// The crashed turn's message id is still known.
	tw := newTestWorker(t, workerOpts{dir: dir})
	if status, dup := tw.sendMessage(t, "conv-crash", "m-1", "hi"); status != http.StatusOK || dup.TurnID != "t_crashed" {
		t.Errorf("duplicate of the crashed turn's message: %d %+v", status, dup)
	}
}

func TestShutdownWaitsForRunningTurn(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-run")
	tw.create(t, "conv-idle")
	_, sent := tw.sendMessage(t, "conv-run", "m-1", "long job")
	ft := tw.h.next(t)
	s := tw.openStream(t, "conv-run", "", "")
	s.mustUntil(t, kind(contract.KindTurnStarted))

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done <- tw.w.Shutdown(ctx)
	}()
	poll.Until(t, "Shutdown has begun", tw.closing)

	// New turns are refused while the running one may finish.
	resp, b := tw.call(t, http.MethodPost, "/v1/sessions/conv-idle/messages", contract.SendMessageRequest{ClientMessageID: "m-2", Text: "hi"})
	wantError(t, resp, b, http.StatusServiceUnavailable, contract.CodeShuttingDown)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	resp, b = tw.call(t, http.MethodPost, contract.SessionsPath, contract.CreateSessionRequest{ConversationID: "conv-new"})
	wantError(t, resp, b, http.StatusServiceUnavailable, contract.CodeShuttingDown)
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a turn was running", err)
	default:
	}

	ft.Emit(contract.Event{Kind: contract.KindTextDelta, Text: "still working"})
	ft.finish("end_turn")
	shutdownReturns(t, done)
	if how := ft.waitEnded(t); how != "released" {
		t.Errorf("the turn ended %q; want it to finish within the grace period", how)
	}
	// Open streams end with the worker.
	if _, err := s.until(func(contract.Event) bool { return false }); !errors.Is(err, io.EOF) {
		t.Errorf("stream after Shutdown: %v, want EOF", err)
	}
	// After Shutdown, commands neither run nor reopen sessions.
	resp, b = tw.call(t, http.MethodPost, "/v1/sessions/conv-idle/messages", contract.SendMessageRequest{ClientMessageID: "m-3", Text: "hi"})
	wantError(t, resp, b, http.StatusServiceUnavailable, contract.CodeShuttingDown)
	resp, b = tw.call(t, http.MethodGet, "/v1/sessions/conv-run", nil)
	wantError(t, resp, b, http.StatusServiceUnavailable, contract.CodeShuttingDown)

	evs := logEvents(t, tw.dir, "conv-run")
	if last := evs[len(evs)-1]; last.Kind != contract.KindTurnFinished || last.TurnID != sent.TurnID {
		t.Errorf("last event %s %s", last.Kind, last.TurnID)
	}
	if evs := logEvents(t, tw.dir, "conv-idle"); len(evs) != 1 {
		t.Errorf("conv-idle has %d events after Shutdown, want only session.created", len(evs))
	}
}

func TestShutdownInterruptsAfterGrace(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	_, sent := tw.sendMessage(t, "conv-1", "m-1", "long job")
	ft := tw.h.next(t)
	ctx, endGrace := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tw.w.Shutdown(ctx) }()
	poll.Until(t, "Shutdown has begun", tw.closing)
	if ft.ctx.Err() != nil {
		t.Fatal("the turn was interrupted before the grace period ended")
	}
	endGrace()
	if how := ft.waitEnded(t); how != "cancelled" {
		t.Errorf("the turn ended %q, want interrupted", how)
	}
	shutdownReturns(t, done)
	evs := logEvents(t, tw.dir, "conv-1")
	last := evs[len(evs)-1]
	if last.Kind != contract.KindTurnFailed || last.TurnID != sent.TurnID || last.Failure.Code != contract.FailWorkerRestarted {
		t.Errorf("last event %+v", last)
	}
}

func TestBadRequests(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	js := func(v any) []byte { b, _ := json.Marshal(v); return b }
	otherTenant := &trust.Signer{Direction: trust.ToWorker, Tenant: "other", Env: testEnv, KeyID: testKeyID, Key: testKey}
	wrongKey := &trust.Signer{Direction: trust.ToWorker, Tenant: testTenant, Env: testEnv, KeyID: testKeyID, Key: []byte("not-the-key-not-the-key-not-the-k")}
	wrongDirection := &trust.Signer{Direction: trust.ToControlPlane, Tenant: testTenant, Env: testEnv, KeyID: testKeyID, Key: testKey}
	type call struct {
		method, path string
		body         []byte
		signer       *trust.Signer // nil: the right one
		unsigned     bool
	}
	// Each group of calls is refused with one status and code.
	tests := []struct {
		status int
		code   string
		calls  map[string]call
	}{
		{http.StatusBadRequest, contract.CodeBadRequest, map[string]call{
			"unknown JSON field": {method: http.MethodPost, path: contract.SessionsPath, body: []byte(`{"conversation_id":"conv-2","colour":"red"}`)},
			"not JSON":           {method: http.MethodPost, path: "/v1/sessions/conv-1/messages", body: []byte(`{"client_message_id":`)},
			"trailing data":      {method: http.MethodPost, path: "/v1/sessions/conv-1/messages", body: []byte(`{"client_message_id":"m","text":"x"}{}`)},
			"empty body":         {method: http.MethodPost, path: contract.SessionsPath},
			"empty text":         {method: http.MethodPost, path: "/v1/sessions/conv-1/messages", body: js(contract.SendMessageRequest{ClientMessageID: "m-1", Text: ""})},
			"whitespace text":    {method: http.MethodPost, path: "/v1/sessions/conv-1/messages", body: js(contract.SendMessageRequest{ClientMessageID: "m-1", Text: " \n\t "})},
		}},
		{http.StatusRequestEntityTooLarge, contract.CodeTooLarge, map[string]call{
			"text too long":  {method: http.MethodPost, path: "/v1/sessions/conv-1/messages", body: js(contract.SendMessageRequest{ClientMessageID: "m-1", Text: strings.Repeat("a", contract.MaxMessageText+1)})},
			"body too large": {method: http.MethodPost, path: "/v1/sessions/conv-1/messages", body: js(contract.SendMessageRequest{ClientMessageID: "m-1", Text: strings.Repeat("a", contract.MaxCommandBody)})},
		}},
		{http.StatusBadRequest, contract.CodeInvalidID, map[string]call{
			"bad client message id":       {method: http.MethodPost, path: "/v1/sessions/conv-1/messages", body: js(contract.SendMessageRequest{ClientMessageID: "../m", Text: "hi"})},
			"missing client message id":   {method: http.MethodPost, path: "/v1/sessions/conv-1/messages", body: js(contract.SendMessageRequest{Text: "hi"})},
			"bad conversation id in body": {method: http.MethodPost, path: contract.SessionsPath, body: js(contract.CreateSessionRequest{ConversationID: "a.b"})},
			"bad user id":                 {method: http.MethodPost, path: contract.SessionsPath, body: js(contract.CreateSessionRequest{ConversationID: "conv-2", UserID: "u/1"})},
			"bad conversation id in path": {method: http.MethodGet, path: "/v1/sessions/a.b"},
		}},
		{http.StatusNotFound, contract.CodeNotFound, map[string]call{
			"unknown session: state":     {method: http.MethodGet, path: "/v1/sessions/conv-nope"},
			"unknown session: send":      {method: http.MethodPost, path: "/v1/sessions/conv-nope/messages", body: js(contract.SendMessageRequest{ClientMessageID: "m-1", Text: "hi"})},
			"unknown session: stream":    {method: http.MethodGet, path: "/v1/sessions/conv-nope/stream"},
			"unknown session: interrupt": {method: http.MethodPost, path: "/v1/sessions/conv-nope/interrupt"},
			"unknown endpoint":           {method: http.MethodGet, path: "/v2/sessions"},
		}},
		{http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed, map[string]call{
			"wrong method: sessions":  {method: http.MethodDelete, path: contract.SessionsPath},
			"wrong method: session":   {method: http.MethodDelete, path: "/v1/sessions/conv-1"},
			"wrong method: messages":  {method: http.MethodGet, path: "/v1/sessions/conv-1/messages"},
			"wrong method: stream":    {method: http.MethodPost, path: "/v1/sessions/conv-1/stream"},
			"wrong method: interrupt": {method: http.MethodPut, path: "/v1/sessions/conv-1/interrupt"},
		}},
		{http.StatusUnauthorized, contract.CodeUnauthorized, map[string]call{
			"unsigned":                   {method: http.MethodGet, path: "/v1/sessions/conv-1", unsigned: true},
			"unsigned: running sessions": {method: http.MethodGet, path: contract.SessionsPath, unsigned: true},
			"running sessions signed for another tenant": {method: http.MethodGet, path: contract.SessionsPath, signer: otherTenant},
			"signed for another tenant":                  {method: http.MethodGet, path: "/v1/sessions/conv-1", signer: otherTenant},
			"signed with another key":                    {method: http.MethodGet, path: "/v1/sessions/conv-1", signer: wrongKey},
			"signed for the other direction":             {method: http.MethodGet, path: "/v1/sessions/conv-1", signer: wrongDirection},
		}},
	}
	for _, g := range tests {
		for name, tc := range g.calls {
			t.Run(name, func(t *testing.T) {
				req, err := http.NewRequest(tc.method, tw.srv.URL+tc.path, bytes.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case tc.unsigned:
				case tc.signer != nil:
					tc.signer.Sign(req, tc.body)
				default:
					tw.signer.Sign(req, tc.body)
				}
				resp, b := send(t, req)
				wantError(t, resp, b, g.status, g.code)
			})
		}
	}
	// Nothing above started a turn or changed the session.
	if st := tw.state(t, "conv-1"); st.Turns != 0 || st.LastSeq != 1 {
		t.Errorf("state after bad requests %+v", st)
	}
}

func TestSignatureReplayRefused(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	body, _ := json.Marshal(contract.CreateSessionRequest{ConversationID: "conv-1"})
	req := tw.request(t, context.Background(), http.MethodPost, contract.SessionsPath, body)
	replay := req.Clone(context.Background())
	replay.Body = io.NopCloser(bytes.NewReader(body))
	if resp, b := send(t, req); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	resp, b := send(t, replay)
	wantError(t, resp, b, http.StatusUnauthorized, contract.CodeUnauthorized)
}

func TestHealthIsUnsigned(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	resp, err := http.Get(tw.srv.URL + contract.HealthPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != `{"status":"ok"}` {
		t.Errorf("healthz: %d %s", resp.StatusCode, b)
	}
}

// TestShutdownDoesNotDeadlockWithSend reproduces the lock order of a send
// that races with Shutdown: send holds the session's lock when it asks the
// turn gate to begin a turn, while Shutdown closes the sessions.
func TestShutdownDoesNotDeadlockWithSend(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "conv-1")
	s := tw.session(t, "conv-1")
	s.mu.Lock()
	locked := true
	defer func() {
		if locked {
			s.mu.Unlock()
		}
	}()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done <- tw.w.Shutdown(ctx)
	}()
	// Wait until Shutdown is blocked on the session's lock, closing it.
	poll.Until(t, "Shutdown waits for the session's lock", func() bool {
		buf := make([]byte, 1<<20)
		stack := buf[:runtime.Stack(buf, true)]
		// At a drain it looks first whether a turn runs (to hand the
		// session over), then closes the session.
		return bytes.Contains(stack, []byte(".(*session).turnRunning(")) || bytes.Contains(stack, []byte(".(*session).close("))
	})
	began := make(chan error, 1)
	go func() {
		_, cancel, err := tw.w.gate.begin()
		if err == nil {
			cancel()
			tw.w.gate.end()
		}
		began <- err
	}()
	select {
	case err := <-began:
		if !errors.Is(err, errShuttingDown) {
			t.Errorf("beginning a turn during Shutdown = %v, want errShuttingDown", err)
		}
	case <-time.After(waitFor):
		t.Error("beginning a turn blocked: Shutdown holds the gate's lock while it waits for a session's")
		defer func() { <-began }() // it can go on once the session's lock is free
	}
	s.mu.Unlock()
	locked = false
	shutdownReturns(t, done)
}

// shutdownReturns waits for the Shutdown that reports to done to return,
// and without an error.
func shutdownReturns(t *testing.T, done <-chan error) {
	t.Helper()
	if err := receive(t, done, "Shutdown did not return"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// notices is the worker's notices of a test: one, or none.
func notices(n string) []string {
	if n == "" {
		return nil
	}
	return []string{n}
}

// A command key rotated in the worker's ring: during the grace commands
// signed with either key are taken; after it one signed with the old key
// is refused (401), one with the new key still taken.
func TestCommandSignedWithRetiredKeyRefused(t *testing.T) {
	// Real time plus an offset, not a fakeclock.Clock: the worker mixes this
	// clock (signatures, idle sessions) with real time (turn durations, the
	// session store's leases), which must not drift apart except by the
	// jump over the key rotation's grace.
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	ring, err := trust.NewRotatingKeyring([]trust.Key{{ID: testKeyID, Secret: testKey}})
	if err != nil {
		t.Fatal(err)
	}
	tw := newTestWorker(t, workerOpts{keys: ring, now: now})
	newKey := bytes.Repeat([]byte{0x5a}, 32)
	grace := 10 * time.Minute
	if err := ring.Set(trust.Rotated(ring.Keys(), trust.Key{ID: "c2", Secret: newKey}, now().Add(grace), now())); err != nil {
		t.Fatal(err)
	}
	oldSigner := tw.signer
	newSigner := &trust.Signer{Direction: trust.ToWorker, Tenant: testTenant, Env: testEnv, KeyID: "c2", Key: newKey, Now: now}
	create := func(s *trust.Signer, conv string) (*http.Response, []byte) {
		tw.signer = s
		return tw.call(t, http.MethodPost, contract.SessionsPath, contract.CreateSessionRequest{ConversationID: conv})
	}
	if resp, b := create(oldSigner, "conv-old"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("old key during the grace: %d %s", resp.StatusCode, b)
	}
	if resp, b := create(newSigner, "conv-new"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("new key during the grace: %d %s", resp.StatusCode, b)
	}
	offset.Store(int64(grace + time.Second))
	resp, b := create(oldSigner, "conv-late")
	wantError(t, resp, b, http.StatusUnauthorized, contract.CodeUnauthorized)
	if resp, b := create(newSigner, "conv-late"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("new key after the grace: %d %s", resp.StatusCode, b)
	}
}

// TestRunningSessions: GET /v1/sessions lists the sessions whose turn runs,
// with the turn, and none once it ended; an idle session is not listed.
func TestRunningSessions(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	running := func() contract.RunningSessions {
		t.Helper()
		resp, b := tw.call(t, http.MethodGet, contract.SessionsPath, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("list: %d %s", resp.StatusCode, b)
		}
		return decode[contract.RunningSessions](t, b)
	}
	if got := running(); len(got.Sessions) != 0 || got.Truncated {
		t.Fatalf("a worker without sessions lists %+v", got)
	}
	tw.create(t, "conv-busy")
	tw.create(t, "conv-idle")
	_, sent := tw.sendMessage(t, "conv-busy", "m1", "hello")
	ft := tw.h.next(t)
	got := running()
	if len(got.Sessions) != 1 || got.Sessions[0].ConversationID != "conv-busy" ||
		got.Sessions[0].Status != contract.StatusRunning || got.Sessions[0].RunningTurnID != sent.TurnID {
		t.Fatalf("while conv-busy's turn %s runs the list is %+v", sent.TurnID, got)
	}
	ft.finish("end_turn")
	ft.waitEnded(t)
	deadline := time.Now().Add(waitFor)
	for len(running().Sessions) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the ended turn is still listed: %+v", running())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
