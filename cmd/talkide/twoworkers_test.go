package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/harness/historytest"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/trust"
)

// twoWorkerLeaseTTL is short so that both workers renew their leases many
// times while they contend (a renewal every 2 s); the handover checked
// below must not depend on it.
const twoWorkerLeaseTTL = 6 * time.Second

// TestTwoWorkersShareSessions runs one control-plane and two workers on
// one session volume, as during a rolling update, and drives the same
// conversations through both workers' command APIs at once. The worker
// without a conversation's lease answers 503 session_elsewhere; the logs
// show that turns never overlapped and that no fenced-out owner wrote.
// Then worker A is shut down (SIGTERM's path) while it runs a long turn: the
// turn finishes within the grace period, A releases its leases, and B
// serves the conversation's next message at once, with the whole history.
func TestTwoWorkersShareSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two workers")
	}
	ctx := context.Background()
	cp, dir, logger := startDevControlPlane(t)
	tokenPath := devIdentityToken(t, cp.Store, dir)
	projects := filepath.Join(dir, "claude", "projects")
	start := func(id string) (*roles.Worker, *commandClient) {
		t.Helper()
		cfg := devWorkerConfig(id, dir, cp.HTTP.URL(), tokenPath, cp.Secrets, logger)
		cfg.LeaseTTL = twoWorkerLeaseTTL
		w := startT(t, roles.StartWorker, cfg)
		return w, newCommandClient(id, w.HTTP.URL(), cfg.CommandKey)
	}
	procA, a := start("worker-a")
	procB, b := start("worker-b")
	workers := []*commandClient{a, b}

	// The control-plane knows the conversations, so that the workers may
	// mint for them and report on them.
	convs := []string{"shared-0", "shared-1", "shared-2", "shared-3"}
	knownConversations(t, cp.Store, convs...)
	// shared-0 starts on A, so that A has a conversation to hand over; the
	// others go to whichever worker creates them first.
	if st, code := a.create(ctx, "shared-0"); st != http.StatusCreated {
		t.Fatalf("create shared-0 on A: %d %s", st, code)
	}
	owner := map[string]*commandClient{"shared-0": a}
	var mu sync.Mutex // guards owner while the contention runs
	var wg sync.WaitGroup
	for _, id := range convs[1:] {
		for _, w := range workers {
			wg.Go(func() {
				st, code := w.create(ctx, id)
				switch {
				case st == http.StatusCreated || st == http.StatusOK:
					mu.Lock()
					defer mu.Unlock()
					if prev := owner[id]; prev != nil && prev != w {
						t.Errorf("%s: both %s and %s opened it", id, prev.name, w.name)
					}
					owner[id] = w
				case st == http.StatusServiceUnavailable && code == contract.CodeSessionElsewhere:
				default:
					t.Errorf("%s: create on %s: %d %s", id, w.name, st, code)
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Contention: every message of every conversation goes to both workers
	// at once, with the same client message id. Only the lease holder may
	// start it; the other must answer session_elsewhere.
	// While a turn runs, both are asked for another message: the holder
	// answers turn_running, the other session_elsewhere. The tool turns
	// take long enough for the leases to be renewed meanwhile.
	var names []string
	for _, id := range convs {
		names = append(names, id+"→"+owner[id].name)
	}
	t.Logf("lease holders: %s", strings.Join(names, ", "))
	const messagesEach = 6
	for _, id := range convs {
		wg.Go(func() {
			for n := range messagesEach {
				text := fmt.Sprintf("message %d of %s", n, id)
				if n%2 == 1 {
					text = fmt.Sprintf(`run [[tool:Bash {"command":"echo %s-%d; sleep 0.5"}]]`, id, n)
				}
				msgID := fmt.Sprintf("m-%s-%d", id, n)
				type answer struct {
					w    *commandClient
					st   int
					code string
					resp contract.SendMessageResponse
				}
				answers := make(chan answer, 2)
				for _, w := range workers {
					go func() {
						st, code, resp := w.send(ctx, id, msgID, text)
						answers <- answer{w, st, code, resp}
					}()
				}
				var started *answer
				for range workers {
					an := <-answers
					switch {
					case an.st == http.StatusAccepted:
						if started != nil {
							t.Errorf("%s: message %d started on both workers", id, n)
						}
						started = &an
					case an.st == http.StatusServiceUnavailable && an.code == contract.CodeSessionElsewhere:
						if an.w == owner[id] {
							t.Errorf("%s: the lease holder %s answered session_elsewhere", id, an.w.name)
						}
					default:
						t.Errorf("%s: message %d on %s: %d %s", id, n, an.w.name, an.st, an.code)
					}
				}
				if started == nil {
					t.Errorf("%s: message %d started nowhere", id, n)
					return
				}
				if started.w != owner[id] {
					t.Errorf("%s: message %d started on %s, the lease is %s's", id, n, started.w.name, owner[id].name)
					return
				}
				if n%2 == 1 {
					for _, w := range workers {
						st, code, _ := w.send(ctx, id, fmt.Sprintf("m-%s-%d-probe", id, n), "while a turn runs")
						want := contract.CodeSessionElsewhere
						if w == owner[id] {
							want = contract.CodeTurnRunning
						}
						if code != want {
							t.Errorf("%s: message sent to %s during a turn: %d %s, want %s", id, w.name, st, code, want)
						}
					}
				}
				if _, err := started.w.waitTurn(ctx, id, started.resp.Seq, started.resp.TurnID); err != nil {
					t.Errorf("%s: turn of message %d: %v", id, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, id := range convs {
		checkSharedSession(t, projects, id, false)
	}

	// Handover: A shuts down while shared-0 runs a long turn. B is asked
	// for the next message all along and must take it as soon as A lets go.
	const grace = 15 * time.Second
	long, err := a.sendOK(ctx, "shared-0", "m-long", `take your time [[tool:Bash {"command":"sleep 1.5; echo finished-in-grace"}]]`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.waitEvent(ctx, "shared-0", long.Seq, func(ev contract.Event) bool { return ev.Kind == contract.KindToolStarted }); err != nil {
		t.Fatalf("the long turn's tool did not start: %v", err)
	}
	shutdownStart := time.Now()
	shutdownDone := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, grace)
		defer cancel()
		shutdownDone <- procA.Stop(sctx)
	}()
	var next contract.SendMessageResponse
	var refused int
	var shutdownTook time.Duration
	for {
		st, code, resp := b.send(ctx, "shared-0", "m-next", "the next message, on another worker")
		if st == http.StatusAccepted {
			next = resp
			break
		}
		if st != http.StatusServiceUnavailable || code != contract.CodeSessionElsewhere {
			t.Fatalf("B while A shuts down: %d %s", st, code)
		}
		refused++
		select {
		case err := <-shutdownDone:
			if err != nil {
				t.Fatalf("A's shutdown: %v", err)
			}
			shutdownTook = time.Since(shutdownStart)
			shutdownDone = nil
			// A has released its leases: B's next try must succeed.
			st, code, resp := b.send(ctx, "shared-0", "m-next", "the next message, on another worker")
			if st != http.StatusAccepted {
				t.Fatalf("B right after A's shutdown: %d %s: the lease was not released", st, code)
			}
			next = resp
		case <-time.After(25 * time.Millisecond): // asking again, as a retrying client would
			continue
		}
		break
	}
	took := time.Since(shutdownStart)
	if shutdownDone != nil {
		if err := <-shutdownDone; err != nil {
			t.Fatalf("A's shutdown: %v", err)
		}
		shutdownTook = time.Since(shutdownStart)
	}
	if shutdownTook >= grace {
		t.Errorf("A's shutdown took %v, the grace period is %v", shutdownTook, grace)
	}
	t.Logf("A's shutdown took %v; B took shared-0 over %v after it began, after %d session_elsewhere answers", shutdownTook, took, refused)

	// The long turn finished on A, inside the grace period.
	l, err := readSession(projects, "shared-0")
	if err != nil {
		t.Fatal(err)
	}
	_, end := l.turns()
	if ev := end[long.TurnID]; ev == nil || ev.Kind != contract.KindTurnFinished {
		t.Fatalf("the long turn ended with %+v, want turn.finished", ev)
	}
	// B's reply counts every message of the history.
	events, err := b.waitTurn(ctx, "shared-0", next.Seq, next.TurnID)
	if err != nil {
		t.Fatalf("B's turn: %v", err)
	}
	l, err = readSession(projects, "shared-0")
	if err != nil {
		t.Fatal(err)
	}
	// The reply is the last record; the request before it held the rest.
	want := fmt.Sprintf("messages=%d you said: the next message", mergedLen(l.transcript[:len(l.transcript)-1]))
	var reply string
	for _, ev := range events {
		if ev.Kind == contract.KindMessage {
			reply = ev.Text
		}
	}
	if !strings.Contains(reply, want) {
		t.Errorf("B's reply %q, want it to contain %q (the whole history)", reply, want)
	}

	// B now serves every conversation, A's included.
	for _, id := range convs[1:] {
		r, err := b.sendWhenFree(ctx, id, "m-after-"+id, "after the handover")
		if err != nil {
			t.Fatalf("%s on B after the handover: %v", id, err)
		}
		if _, err := b.waitTurn(ctx, id, r.Seq, r.TurnID); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := procB.Stop(sctx); err != nil {
		t.Fatalf("B's shutdown: %v", err)
	}
	for _, id := range convs {
		checkSharedSession(t, projects, id, true)
	}
	checkReports(t, cp.Store, projects, convs)
}

// checkSharedSession validates a session two workers wrote: the store's
// validator (seq continuity, one turn at a time) and no record from a
// fenced-out owner; with final, every turn has ended and the transcript is
// valid without allowance.
func checkSharedSession(t *testing.T, projects, id string, final bool) {
	t.Helper()
	l, err := readSession(projects, id)
	if err != nil {
		t.Errorf("%s: %v", id, err)
		return
	}
	if l.v.Stale != 0 {
		t.Errorf("%s: %d records appended by a fenced-out owner", id, l.v.Stale)
	}
	if err := historytest.Check(l.transcript, !final); err != nil {
		t.Errorf("%s: transcript: %v", id, err)
	}
	if final && l.v.OpenTurn != "" {
		t.Errorf("%s: turn %s never ended", id, l.v.OpenTurn)
	}
	// Between a turn.started and its end, no event of another turn.
	open := ""
	for _, ev := range l.events {
		switch {
		case ev.Kind == contract.KindTurnStarted:
			open = ev.TurnID
		case ev.TurnID != "" && open != "" && ev.TurnID != open:
			t.Errorf("%s: event %d (%s) of turn %s while turn %s runs", id, ev.Seq, ev.Kind, ev.TurnID, open)
		case contract.Terminal(ev.Kind):
			open = ""
		}
	}
}

// mergedLen is the number of messages the harness sends for recs: with
// consecutive user messages merged.
func mergedLen(recs []json.RawMessage) int {
	n, prev := 0, ""
	for _, r := range recs {
		var m struct {
			Role string `json:"role"`
		}
		json.Unmarshal(r, &m)
		if m.Role == "user" && prev == "user" {
			continue
		}
		n++
		prev = m.Role
	}
	return n
}

// commandClient calls one worker's signed command API, as the
// control-plane does.
type commandClient struct {
	name   string
	url    string
	signer *trust.Signer
}

// do sends a signed command; it returns the status and, for an error, the
// contract error code.
func (c *commandClient) do(ctx context.Context, method, path string, in, out any) (int, string, error) {
	var body []byte
	if in != nil {
		body, _ = json.Marshal(in)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	c.signer.Sign(req, body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var e contract.Error
		json.Unmarshal(data, &e)
		return resp.StatusCode, e.Error.Code, nil
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, "", err
		}
	}
	return resp.StatusCode, "", nil
}

func (c *commandClient) create(ctx context.Context, id string) (int, string) {
	st, code, err := c.do(ctx, http.MethodPost, contract.SessionsPath, contract.CreateSessionRequest{ConversationID: id, UserID: roles.DevUser}, nil)
	if err != nil {
		return 0, err.Error()
	}
	return st, code
}

func (c *commandClient) send(ctx context.Context, id, msgID, text string) (int, string, contract.SendMessageResponse) {
	var r contract.SendMessageResponse
	st, code, err := c.do(ctx, http.MethodPost, strings.Replace(contract.MessagesPath, "{id}", id, 1), contract.SendMessageRequest{ClientMessageID: msgID, Text: text}, &r)
	if err != nil {
		return 0, err.Error(), r
	}
	return st, code, r
}

func (c *commandClient) sendOK(ctx context.Context, id, msgID, text string) (contract.SendMessageResponse, error) {
	st, code, r := c.send(ctx, id, msgID, text)
	if st != http.StatusAccepted {
		return r, fmt.Errorf("send to %s on %s: %d %s", id, c.name, st, code)
	}
	return r, nil
}

// sendWhenFree sends, waiting out a turn that is still running.
func (c *commandClient) sendWhenFree(ctx context.Context, id, msgID, text string) (contract.SendMessageResponse, error) {
	for {
		st, code, r := c.send(ctx, id, msgID, text)
		switch {
		case st == http.StatusAccepted:
			return r, nil
		case st == http.StatusConflict && code == contract.CodeTurnRunning:
			var state contract.SessionState
			c.do(ctx, http.MethodGet, strings.Replace(contract.SessionPath, "{id}", id, 1), nil, &state)
			if state.RunningTurnID != "" {
				if _, err := c.waitTurn(ctx, id, 0, state.RunningTurnID); err != nil {
					return r, err
				}
			}
		default:
			return r, fmt.Errorf("send to %s on %s: %d %s", id, c.name, st, code)
		}
	}
}

// waitEvent follows the worker's stream of id from after until stop says
// so, and returns the events it read.
func (c *commandClient) waitEvent(ctx context.Context, id string, after int64, stop func(contract.Event) bool) ([]contract.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url+strings.Replace(contract.StreamPath, "{id}", id, 1), nil)
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	c.signer.Sign(req, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stream: status %d", resp.StatusCode)
	}
	r := sse.NewReader(bufio.NewReader(resp.Body), 1<<20)
	var got []contract.Event
	for {
		e, err := r.Next()
		if err != nil {
			return got, fmt.Errorf("stream ended after %d events: %w", len(got), errors.Join(err, ctx.Err()))
		}
		var ev contract.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			return got, err
		}
		got = append(got, ev)
		if stop(ev) {
			return got, nil
		}
	}
}

// waitTurn follows the stream until turn ends and fails unless it
// finished normally.
func (c *commandClient) waitTurn(ctx context.Context, id string, after int64, turn string) ([]contract.Event, error) {
	events, err := c.waitEvent(ctx, id, after, func(ev contract.Event) bool { return ev.TurnID == turn && contract.Terminal(ev.Kind) })
	if err != nil {
		return events, err
	}
	if last := events[len(events)-1]; last.Kind != contract.KindTurnFinished {
		return events, fmt.Errorf("turn %s ended with %s %+v", turn, last.Kind, last.Failure)
	}
	return events, nil
}
