package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// tally counts what a conversation's events say of its messages.
type tally struct {
	users    map[string]int    // user messages, by text
	replies  map[string]string // the reply's text, by turn
	finished map[string]int    // turn.finished events, by turn
}

func newTally() *tally {
	return &tally{users: map[string]int{}, replies: map[string]string{}, finished: map[string]int{}}
}

func (c *tally) add(ev contract.Event) {
	switch ev.Kind {
	case contract.KindUserMessage:
		c.users[ev.Text]++
	case contract.KindMessage:
		c.replies[ev.TurnID] += ev.Text
	case contract.KindTurnFinished:
		c.finished[ev.TurnID]++
	}
}

// rollout restarts a Deployment and returns a channel closed once its
// rollout has finished.
func (e *env) rollout(t *testing.T, ns, deployment string) <-chan struct{} {
	t.Helper()
	e.kubectl(t, "-n", ns, "rollout", "restart", "deployment/"+deployment)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.kubectl(t, "-n", ns, "rollout", "status", "deployment/"+deployment, "--timeout=5m")
	}()
	return done
}

// turnsDuring sends messages one after another, each once its turn has
// ended, until done is closed (and at least n), and returns what the
// control-plane acknowledged: the turn ids, by message text.
func (e *env) turnsDuring(t *testing.T, ctx context.Context, id string, stream *browserStream, done <-chan struct{}, n int) map[string]string {
	t.Helper()
	sent := map[string]string{}
	for i := 0; ; i++ {
		select {
		case <-done:
			if i >= n {
				return sent
			}
		default:
		}
		text := fmt.Sprintf("message %d during the rollout", i)
		r, err := e.client.Send(ctx, id, text)
		if err != nil {
			t.Fatalf("send %q: %v", text, err)
		}
		sent[text] = r.TurnID
		stream.await(t, "the end of "+r.TurnID, 3*time.Minute, func(ev contract.Event) bool {
			return ev.TurnID == r.TurnID && contract.Terminal(ev.Kind)
		})
	}
}

// checkRollout waits for the stream, whose context has been cancelled, to
// end, and fails unless it carried every event once and every
// acknowledged message once, its turn finished with the simulator's
// answer to it.
func checkRollout(t *testing.T, whose string, stream *browserStream, sent map[string]string) {
	t.Helper()
	<-stream.done
	stream.exactlyOnce(t)
	stream.mu.Lock()
	defer stream.mu.Unlock()
	c := newTally()
	for _, ev := range stream.events {
		c.add(ev)
	}
	for text, turn := range sent {
		if c.users[text] != 1 {
			t.Errorf("%q is in the stream %d times", text, c.users[text])
		}
		if c.finished[turn] != 1 || !strings.Contains(c.replies[turn], text) {
			t.Errorf("%q (turn %s): finished %d times, reply %q", text, turn, c.finished[turn], c.replies[turn])
		}
	}
	t.Logf("%d messages acknowledged during %s rollout, the stream reconnected %d times", len(sent), whose, stream.connections-1)
}

// TestRolloutRestartOfTheWorker: the worker's Deployment is restarted
// while a turn streams a command's output and while messages keep coming:
// the old pod finishes the running turn and hands the conversation over;
// the browser's stream carries every event once, and no acknowledged
// message is lost.
func TestRolloutRestartOfTheWorker(t *testing.T) {
	e := clusterEnv(t)
	id, ctx, cancel, stream := e.followNew(t, 8*time.Minute)
	long := e.bashRunning(t, ctx, stream, id, "for i in $(seq 1 20); do echo line $i; sleep 0.5; done", 120000)
	done := e.rollout(t, "acme-dev", "talkide-worker")
	var output strings.Builder
	end := stream.await(t, "the streaming turn's end", 3*time.Minute, func(ev contract.Event) bool {
		if ev.TurnID == long.TurnID && ev.Kind == contract.KindToolOutput {
			output.WriteString(ev.Tool.Output)
		}
		return ev.TurnID == long.TurnID && contract.Terminal(ev.Kind)
	})
	if end.Kind != contract.KindTurnFinished || !strings.Contains(output.String(), "line 20\n") {
		t.Errorf("the turn across the rollout ended %s with the output %q", end.Kind, output.String())
	}
	sent := e.turnsDuring(t, ctx, id, stream, done, 3)
	cancel()
	checkRollout(t, "the worker's", stream, sent)
}

// TestRolloutRestartOfTheControlPlane: both control-plane replicas are
// replaced, one after the other, while a browser follows a conversation
// and messages keep coming. The browser's stream, cut when its replica
// goes, comes back with Last-Event-ID and carries every event once; no
// acknowledged message is lost.
func TestRolloutRestartOfTheControlPlane(t *testing.T) {
	e := clusterEnv(t)
	id, ctx, cancel, stream := e.followNew(t, 8*time.Minute)
	done := e.rollout(t, "talkide", "talkide-controlplane")
	sent := e.turnsDuring(t, ctx, id, stream, done, 3)
	cancel()
	checkRollout(t, "the control-plane's", stream, sent)
}
