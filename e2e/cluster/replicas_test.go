package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// The figures the replicas test drives: conversations, the browsers that
// send at once, and how long the load runs around each scaling step.
const (
	replicaConversations = 1000
	replicaSenders       = 16
	replicaSettle        = 10 * time.Second
)

// scaleWorkers sets acme/dev's worker replicas with talkide admin env scale
// and waits until the Deployment has n ready pods of its newest template.
func (e *env) scaleWorkers(t *testing.T, n int) {
	t.Helper()
	e.cpAdmin(t, "env", "scale", "--tenant", "acme", "--env", "dev", "--replicas", strconv.Itoa(n))
	want := fmt.Sprintf("%d %d %d", n, n, n)
	deadline := time.Now().Add(4 * time.Minute)
	for {
		got := strings.TrimSpace(e.kubectl(t, "-n", "acme-dev", "get", "deployment", "talkide-worker",
			"-o", "jsonpath={.status.replicas} {.status.readyReplicas} {.status.updatedReplicas}"))
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme-dev's worker has replicas, ready, updated %q after 4 minutes, want %q:\n%s", got, want,
				e.kubectl(t, "-n", "acme-dev", "get", "pods,events"))
		}
		time.Sleep(250 * time.Millisecond) // polling the Deployment's status
	}
}

// replica is one worker pod and the series its /metrics exported.
type replica struct {
	pod, ip string
	series  map[string]float64
}

// metric returns the value of the series named whole, e.g.
// `talkide_worker_commands_forwarded_total{reason="holder"}`.
func (r replica) metric(name string) float64 { return r.series[name] }

// replicas scrapes /metrics of every running, not terminating, worker pod
// of acme-dev, straight at its pod address (the test runs in the
// cluster's network namespace).
func (e *env) replicas(t *testing.T) []replica {
	t.Helper()
	out := e.kubectl(t, "-n", "acme-dev", "get", "pods", "-l", "app.kubernetes.io/name=talkide-worker",
		"--field-selector", "status.phase=Running",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.metadata.deletionTimestamp}{"\n"}{end}`)
	var rs []replica
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 { // no address yet, or terminating
			continue
		}
		r := replica{pod: f[0], ip: f[1], series: map[string]float64{}}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.ip+":8080/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("scraping %s: %v", r.pod, err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			l := sc.Text()
			if !strings.HasPrefix(l, "talkide_worker_") {
				continue
			}
			i := strings.LastIndexByte(l, ' ')
			if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
				r.series[l[:i]] = v
			}
		}
		resp.Body.Close()
		cancel()
		rs = append(rs, r)
	}
	return rs
}

// sum adds up one series over rs.
func sum(rs []replica, name string) float64 {
	var n float64
	for _, r := range rs {
		n += r.metric(name)
	}
	return n
}

// The series the test reads.
const (
	seriesCommands  = "talkide_worker_commands_total"
	seriesElsewhere = `talkide_worker_commands_refused_total{code="session_elsewhere"}`
	seriesHolder    = `talkide_worker_commands_forwarded_total{reason="holder"}`
	seriesPlacement = `talkide_worker_commands_forwarded_total{reason="placement"}`
	seriesOpen      = "talkide_worker_sessions_open"
)

// sentTurn is a message the control-plane acknowledged and the turn it
// started.
type sentTurn struct{ text, turn string }

// tryTurn sends text to conversation id and follows its stream from after
// to the turn's end: the error-returning turn, for senders that are not
// the test's goroutine.
func (e *env) tryTurn(ctx context.Context, id, text string, after int64) (sentTurn, contract.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	r, err := e.client.Send(ctx, id, text)
	if err != nil {
		return sentTurn{}, contract.Event{}, fmt.Errorf("send %q: %w", text, err)
	}
	var end contract.Event
	err = e.client.Stream(ctx, id, after, func(ev contract.Event) error {
		if ev.TurnID == r.TurnID && contract.Terminal(ev.Kind) {
			end = ev
			return errTurnEnded
		}
		return nil
	})
	if !errors.Is(err, errTurnEnded) {
		return sentTurn{}, contract.Event{}, fmt.Errorf("turn %s of %s: the stream ended with %v", r.TurnID, id, err)
	}
	if end.Kind != contract.KindTurnFinished {
		return sentTurn{}, end, fmt.Errorf("turn %s of %s ended %s", r.TurnID, id, end.Kind)
	}
	return sentTurn{text, r.TurnID}, end, nil
}

// conversationLoad is what the senders did: the messages acknowledged per
// conversation, in order, and the failures.
type conversationLoad struct {
	mu     sync.Mutex
	sent   map[string][]sentTurn
	last   map[string]int64 // the seq of each conversation's last turn end
	errors []error
}

// run has senders send one message after another to the conversations
// ids, each sender its own share, until stop is closed (each conversation
// at least once when once is set), and returns when they are all done.
func (e *env) run(ctx context.Context, l *conversationLoad, ids []string, stop <-chan struct{}, once bool) {
	var wg sync.WaitGroup
	for s := range replicaSenders {
		wg.Go(func() {
			for i := s; ; i += replicaSenders {
				if once && i >= len(ids) {
					return
				}
				select {
				case <-stop:
					if !once {
						return
					}
				case <-ctx.Done():
					return
				default:
				}
				id := ids[i%len(ids)]
				l.mu.Lock()
				n, after := len(l.sent[id]), l.last[id]
				l.mu.Unlock()
				sent, end, err := e.tryTurn(ctx, id, fmt.Sprintf("message %d to %s", n, id), after)
				l.mu.Lock()
				if err != nil {
					l.errors = append(l.errors, err)
				} else {
					l.sent[id] = append(l.sent[id], sent)
					l.last[id] = end.Seq
				}
				l.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// check reads each conversation's whole stream and fails unless every
// acknowledged message is in it once, its turn finished once with the
// simulator's answer to it, and nothing else was sent.
func (e *env) check(t *testing.T, l *conversationLoad) {
	t.Helper()
	for _, err := range l.errors {
		t.Error(err)
	}
	for id, sent := range l.sent {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		users := map[string]int{}
		finished := map[string]int{}
		replies := map[string]string{}
		last := sent[len(sent)-1].turn
		err := e.client.Stream(ctx, id, 0, func(ev contract.Event) error {
			switch ev.Kind {
			case contract.KindUserMessage:
				users[ev.Text]++
			case contract.KindMessage:
				replies[ev.TurnID] += ev.Text
			case contract.KindTurnFinished:
				finished[ev.TurnID]++
			}
			if ev.TurnID == last && contract.Terminal(ev.Kind) {
				return errTurnEnded
			}
			return nil
		})
		cancel()
		if !errors.Is(err, errTurnEnded) {
			t.Errorf("%s: reading its stream: %v", id, err)
			continue
		}
		if len(users) != len(sent) {
			t.Errorf("%s holds %d user messages, %d were acknowledged", id, len(users), len(sent))
		}
		for _, s := range sent {
			if users[s.text] != 1 || finished[s.turn] != 1 || !strings.Contains(replies[s.turn], s.text) {
				t.Errorf("%s: %q is there %d times, its turn %s finished %d times with %q", id, s.text, users[s.text], s.turn, finished[s.turn], replies[s.turn])
			}
		}
	}
}

// TestReplicasShareTheEnv: acme/dev is scaled to three worker replicas with
// talkide admin env scale. A thousand conversations are made and each
// turns twice through the Service: every command reaches the replica that
// holds its conversation on the first try (no replica answers
// session_elsewhere; the ones that land elsewhere are forwarded) and the
// conversations spread over the three. Then, while turns keep coming, the
// env is scaled to five (the new replicas take conversations) and to two
// (the drained ones hand theirs over): every acknowledged message is in
// its conversation once, its turn finished once.
func TestReplicasShareTheEnv(t *testing.T) {
	e := clusterEnv(t)
	t.Cleanup(func() { e.scaleWorkers(t, 1) })
	e.scaleWorkers(t, 3)

	ids := make([]string, replicaConversations)
	var created sync.WaitGroup
	var mu sync.Mutex
	var createErrs []error
	for s := range replicaSenders {
		created.Go(func() {
			for i := s; i < len(ids); i += replicaSenders {
				id, err := e.tryConversation(t.Context())
				mu.Lock()
				if err != nil {
					createErrs = append(createErrs, err)
				}
				ids[i] = id
				mu.Unlock()
			}
		})
	}
	created.Wait()
	if len(createErrs) > 0 {
		t.Fatalf("%d conversations not created, the first: %v", len(createErrs), createErrs[0])
	}

	l := &conversationLoad{sent: map[string][]sentTurn{}, last: map[string]int64{}}
	before := e.replicas(t)
	for round := range 2 {
		start := time.Now()
		e.run(t.Context(), l, ids, nil, true)
		elapsed := time.Since(start)
		after := e.replicas(t)
		if len(after) != 3 {
			t.Fatalf("%d replicas answer, want 3", len(after))
		}
		for _, r := range after {
			var was float64
			for _, b := range before {
				if b.pod == r.pod {
					was = b.metric(seriesCommands)
				}
			}
			t.Logf("figure: round %d, replica %s: %.0f commands, %.1f per second, %.0f conversations open", round+1, r.pod,
				r.metric(seriesCommands)-was, (r.metric(seriesCommands)-was)/elapsed.Seconds(), r.metric(seriesOpen))
			if r.metric(seriesOpen) == 0 {
				t.Errorf("replica %s holds no conversation after round %d", r.pod, round+1)
			}
		}
		t.Logf("figure: round %d: %d turns in %s; forwarded to the holder %.0f, placed elsewhere %.0f, session_elsewhere %.0f",
			round+1, len(ids), elapsed.Round(time.Millisecond), sum(after, seriesHolder), sum(after, seriesPlacement), sum(after, seriesElsewhere))
		if n := sum(after, seriesElsewhere); n != 0 {
			t.Errorf("round %d: %.0f commands found no holder (session_elsewhere)", round+1, n)
		}
		before = after
	}
	if sum(before, seriesHolder) == 0 {
		t.Error("no command was forwarded to its holder: the Service sent every one to the holder by chance, or the replicas do not route")
	}
	e.check(t, l)
	if t.Failed() {
		return
	}

	// Scaling during a load of turns.
	stop := make(chan struct{})
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		e.run(t.Context(), l, ids, stop, false)
	}()
	time.Sleep(replicaSettle)
	e.scaleWorkers(t, 5)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rs := e.replicas(t)
		idle := 0
		for _, r := range rs {
			if r.metric(seriesOpen) == 0 {
				idle++
			}
		}
		if len(rs) == 5 && idle == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("two minutes after scaling to 5, %d replicas answer and %d of them hold no conversation", len(rs), idle)
			break
		}
		time.Sleep(time.Second) // polling the new replicas' load
	}
	time.Sleep(replicaSettle)
	e.scaleWorkers(t, 2)
	time.Sleep(replicaSettle)
	close(stop)
	<-loaded
	turns := 0
	for _, s := range l.sent {
		turns += len(s)
	}
	t.Logf("figure: %d turns acknowledged in all, %d of them while scaling 3 → 5 → 2", turns, turns-2*len(ids))
	e.check(t, l)
}
