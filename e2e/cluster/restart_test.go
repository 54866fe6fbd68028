package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sse"
)

// browserStream is one browser's event stream of a conversation, held
// open on one connection and recorded as it came, duplicates and all (the
// chat client drops what it has seen; a browser's EventSource would not).
type browserStream struct {
	mu     sync.Mutex // guards events, err
	events []contract.Event
	err    error
	done   chan struct{}
}

// openStream opens conversation id's stream from its start, as the web UI
// does, and records it until ctx ends.
func (e *env) openStream(t *testing.T, ctx context.Context, id string) *browserStream {
	t.Helper()
	token, err := os.ReadFile(os.Getenv("TALKIDE_TOKEN_FILE"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/api/conversations/"+id+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("stream: %s", resp.Status)
	}
	s := &browserStream{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer resp.Body.Close()
		r := sse.NewReader(resp.Body, 1<<20)
		for {
			ev, err := r.Next()
			if err != nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
				return
			}
			var c contract.Event
			if json.Unmarshal(ev.Data, &c) != nil || c.Seq == 0 {
				continue // not a conversation event (a notice of the stream's own)
			}
			s.mu.Lock()
			s.events = append(s.events, c)
			s.mu.Unlock()
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
		err := s.err
		s.mu.Unlock()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("waiting for %s: the stream ended: %v", what, err)
		}
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
	id := e.conversation(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	stream := e.openStream(t, ctx, id)

	in, _ := json.Marshal(map[string]any{"command": "echo started; sleep 300", "timeout": 600000})
	cut, err := e.client.Send(ctx, id, "[[tool:Bash "+string(in)+"]]")
	if err != nil {
		t.Fatal(err)
	}
	stream.await(t, "the command's output", time.Minute, func(ev contract.Event) bool {
		return ev.TurnID == cut.TurnID && ev.Kind == contract.KindToolOutput
	})
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
	if stream.err != nil && !errors.Is(stream.err, context.Canceled) && !errors.Is(stream.err, io.ErrUnexpectedEOF) {
		t.Logf("the stream ended with %v", stream.err)
	}
}
