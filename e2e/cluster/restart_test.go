package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sse"
)

// browserStream is one browser's event stream of a conversation, as an
// EventSource holds it: one connection for as long as it lasts, and on its
// end a new one that names the last event it got (Last-Event-ID). Every
// event is recorded as it came, duplicates and all (the chat client drops
// what it has seen; a browser would show it twice).
type browserStream struct {
	mu          sync.Mutex // guards events, err, connections
	events      []contract.Event
	err         error
	connections int
	done        chan struct{}
}

// followNew makes a conversation and follows its stream, as a browser does,
// until limit has passed, cancel is called or the test ends.
func (e *env) followNew(t *testing.T, limit time.Duration) (id string, ctx context.Context, cancel context.CancelFunc, stream *browserStream) {
	t.Helper()
	id = e.conversation(t)
	ctx, cancel = context.WithTimeout(t.Context(), limit)
	t.Cleanup(cancel)
	return id, ctx, cancel, e.openStream(t, ctx, id)
}

// openStream follows conversation id's stream from its start until ctx
// ends.
func (e *env) openStream(t *testing.T, ctx context.Context, id string) *browserStream {
	t.Helper()
	s := &browserStream{done: make(chan struct{})}
	connect := func(last int64) (io.ReadCloser, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/api/conversations/"+id+"/stream", nil)
		req.Header.Set("Authorization", "Bearer "+e.token)
		req.Header.Set("Accept", "text/event-stream")
		if last > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, errors.New("stream: " + resp.Status)
		}
		return resp.Body, nil
	}
	go func() {
		defer close(s.done)
		var last int64
		for ctx.Err() == nil {
			body, err := connect(last)
			if err == nil {
				s.mu.Lock()
				s.connections++
				s.mu.Unlock()
				r := sse.NewReader(body, 1<<20)
				for {
					ev, rerr := r.Next()
					if rerr != nil {
						err = rerr
						break
					}
					var c contract.Event
					if json.Unmarshal(ev.Data, &c) != nil || c.Seq == 0 {
						continue // not a conversation event
					}
					last = c.Seq
					s.mu.Lock()
					s.events = append(s.events, c)
					s.mu.Unlock()
				}
				body.Close()
			}
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			select { // an EventSource's retry delay
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return s
}

// await waits until the stream has an event cond accepts and returns it.
func (s *browserStream) await(t *testing.T, what string, timeout time.Duration, cond func(contract.Event) bool) contract.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		for _, ev := range s.events {
			if cond(ev) {
				s.mu.Unlock()
				return ev
			}
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond) // polling the recording goroutine's events
	}
}

// exactlyOnce fails unless the stream carried seq 1 to its last, each once.
func (s *browserStream) exactlyOnce(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ev := range s.events {
		if ev.Seq != int64(i+1) {
			var seqs []int64
			for _, e := range s.events {
				seqs = append(seqs, e.Seq)
			}
			t.Fatalf("the stream carried seqs %v: not each once, in order", seqs)
		}
	}
}

// TestWorkerPodKilledMidTurn: the worker's pod is killed (as by a node's
// failure: no grace) while a command runs. The replacement pod resumes the
// session from the volume, the cut turn ends worker_restarted, the next
// turn works, and a browser stream held open all the while carries every
// event exactly once.
func TestWorkerPodKilledMidTurn(t *testing.T) {
	e := clusterEnv(t)
	id, ctx, cancel, stream := e.followNew(t, 5*time.Minute)

	cut := e.bashRunning(t, ctx, stream, id, "echo started; sleep 300", 600000)
	pod := e.workerPod(t)
	killed := time.Now()
	e.kubectl(t, "-n", "acme-dev", "delete", "pod", pod, "--grace-period=0", "--force", "--wait=false")

	failed := stream.await(t, "the cut turn's end", 3*time.Minute, func(ev contract.Event) bool {
		return ev.TurnID == cut.TurnID && contract.Terminal(ev.Kind)
	})
	if failed.Kind != contract.KindTurnFailed || failed.Failure == nil || failed.Failure.Code != contract.FailWorkerRestarted {
		b, _ := json.Marshal(failed)
		t.Errorf("the cut turn ended %s, want turn.failed %s", b, contract.FailWorkerRestarted)
	}
	next, err := e.client.Send(ctx, id, "after the restart")
	if err != nil {
		t.Fatal(err)
	}
	var reply strings.Builder
	end := stream.await(t, "the next turn's end", 3*time.Minute, func(ev contract.Event) bool {
		if ev.TurnID == next.TurnID && ev.Kind == contract.KindMessage {
			reply.WriteString(ev.Text)
		}
		return ev.TurnID == next.TurnID && contract.Terminal(ev.Kind)
	})
	t.Logf("figure: worker pod killed to the conversation answering again: %s", time.Since(killed).Round(100*time.Millisecond))
	// The model sees the cut call's result (interrupted) with the message:
	// the simulator quotes it.
	if end.Kind != contract.KindTurnFinished || !strings.Contains(reply.String(), "[simulator]") || !strings.Contains(reply.String(), "interrupted") {
		t.Errorf("the next turn ended %s with the reply %q", end.Kind, reply.String())
	}
	if e.workerPod(t) == pod {
		t.Error("the same pod answers")
	}
	cancel()
	<-stream.done
	stream.exactlyOnce(t)
	if stream.connections != 1 {
		t.Errorf("the browser's stream was cut %d times: the control-plane holds it across the worker's restart", stream.connections-1)
	}
}
