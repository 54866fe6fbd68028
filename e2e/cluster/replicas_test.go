package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/chatclient"
	"github.com/talkide/platform/internal/contract"
)

// The figures the replicas test drives: conversations
// (TALKIDE_E2E_CONVERSATIONS changes it, e.g. to 10000 for the memory
// figure), the browsers that send at once (30 above a thousand
// conversations: a user's streams are capped at 32), and how long the load
// runs around each scaling step.
const (
	replicaConversations = 1000
	replicaSenders       = 16
	replicaSettle        = 10 * time.Second
	// replicaPace spaces one sender's turns: a turn is two requests (the
	// message and its stream), and a token may make 600 a minute.
	replicaPace = 250 * time.Millisecond
)

// scaleWorkers sets acme/dev's worker replicas with talkide admin env scale
// and waits until the Deployment has n ready pods of its newest template
// and no other pod.
func (e *env) scaleWorkers(t *testing.T, n int) {
	t.Helper()
	e.cpAdmin(t, "env", "scale", "--tenant", "acme", "--env", "dev", "--replicas", strconv.Itoa(n))
	// The Deployment's counts leave out pods being deleted: the test waits
	// for those too, so that what follows meets n pods and no drain.
	want := fmt.Sprintf("%d %d %d pods %d", n, n, n, n)
	deadline := time.Now().Add(4 * time.Minute)
	for {
		got := strings.TrimSpace(e.kubectl(t, "-n", "acme-dev", "get", "deployment", "talkide-worker",
			"-o", "jsonpath={.status.replicas} {.status.readyReplicas} {.status.updatedReplicas}"))
		// Failed pods (evicted) are never deleted by the Deployment.
		pods := strings.Fields(e.kubectl(t, "-n", "acme-dev", "get", "pods", "-l", "app.kubernetes.io/name=talkide-worker",
			"--field-selector", "status.phase!=Failed", "-o", "name"))
		got = fmt.Sprintf("%s pods %d", got, len(pods))
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme-dev's worker has replicas, ready, updated, pods %q after 4 minutes, want %q:\n%s", got, want,
				e.kubectl(t, "-n", "acme-dev", "get", "pods,events"))
		}
		time.Sleep(250 * time.Millisecond) // polling the Deployment's status
	}
}

// senders returns n copies of e, each with an API token of its own for
// the user e2e: the control-plane bounds the requests of one token (600 a
// minute), and a thousand conversations turning are the work of a team.
func (e *env) senders(t *testing.T, n int) []*env {
	t.Helper()
	es := make([]*env, n)
	for i := range es {
		out := e.cpAdmin(t, "api-token", "issue", "--user", "e2e", "--name", fmt.Sprintf("replicas-%d", i), "--ttl", "1h")
		c := *e
		for _, f := range strings.Fields(out) {
			if strings.HasPrefix(f, "tka_") {
				c.token = f
			}
		}
		var err error
		if c.client, err = chatclient.New(c.url, &chatclient.Options{Token: c.token}); c.token == e.token || err != nil {
			t.Fatalf("no API token in %q: %v", out, err)
		}
		es[i] = &c
	}
	return es
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
	var rs []replica
	for _, p := range e.livePods(t) {
		r := replica{pod: p.name, ip: p.ip, series: map[string]float64{}}
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
			if !strings.HasPrefix(l, "talkide_worker_") && !strings.HasPrefix(l, seriesMemory) {
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

// since is how much series name grew on r since the replicas were
// before (all of it on a pod that was not there then).
func (r replica) since(before []replica, name string) float64 {
	for _, b := range before {
		if b.pod == r.pod {
			return r.metric(name) - b.metric(name)
		}
	}
	return r.metric(name)
}

// grew is how much series name grew over the replicas from before to
// after.
func grew(before, after []replica, name string) float64 {
	var n float64
	for _, r := range after {
		n += r.since(before, name)
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
	seriesMemory    = "process_resident_memory_bytes"
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
	took   []time.Duration  // how long each turn took, message to end
	errors []error
}

// run has senders send one message after another to the conversations
// ids, each sender its own share, until stop is closed (each conversation
// once when stop is nil), and returns when they are all done. With fresh
// set, every fresh-th message of a sender goes to a conversation it makes
// then, as users start new ones.
func run(ctx context.Context, senders []*env, l *conversationLoad, ids []string, stop <-chan struct{}, fresh int) {
	var wg sync.WaitGroup
	for s, e := range senders {
		var own []string
		for i := s; i < len(ids); i += len(senders) {
			own = append(own, ids[i])
		}
		wg.Go(func() {
			pace := time.NewTicker(replicaPace)
			defer pace.Stop()
			for k := 0; stop != nil || k < len(own); k++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-pace.C:
				}
				id := own[k%len(own)]
				if fresh > 0 && k%fresh == fresh-1 {
					var err error
					if id, err = e.tryConversation(ctx); err != nil {
						l.fail(err)
						continue
					}
					own = append(own, id)
				}
				l.mu.Lock()
				n, after := len(l.sent[id]), l.last[id]
				l.mu.Unlock()
				start := time.Now()
				sent, end, err := e.tryTurn(ctx, id, fmt.Sprintf("message %d to %s", n, id), after)
				if err != nil {
					l.fail(err)
					continue
				}
				l.mu.Lock()
				l.sent[id] = append(l.sent[id], sent)
				l.last[id] = end.Seq
				l.took = append(l.took, time.Since(start))
				l.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// fail records a sender's failure.
func (l *conversationLoad) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, err)
}

// turnTimes returns the p50, p99 and longest of the turns run since the
// last call, from message to end, and forgets them.
func (l *conversationLoad) turnTimes() (p50, p99, longest time.Duration) {
	l.mu.Lock()
	took := l.took
	l.took = nil
	l.mu.Unlock()
	if len(took) == 0 {
		return 0, 0, 0
	}
	slices.Sort(took)
	return took[len(took)/2], took[len(took)*99/100], took[len(took)-1]
}

// check reads each conversation's whole stream, the senders sharing the
// reading, and fails unless every acknowledged message is in it once, its
// turn finished once with the simulator's answer to it, and nothing else
// was sent.
func check(t *testing.T, senders []*env, l *conversationLoad) {
	t.Helper()
	for _, err := range l.errors {
		t.Error(err)
	}
	var ids []string
	for id := range l.sent {
		ids = append(ids, id)
	}
	var mu sync.Mutex
	var problems []string
	var wg sync.WaitGroup
	for s, e := range senders {
		wg.Go(func() {
			for i := s; i < len(ids); i += len(senders) {
				p := e.checkOne(t.Context(), ids[i], l.sent[ids[i]])
				mu.Lock()
				problems = append(problems, p...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
}

// checkOne reads conversation id's stream and says what is wrong with it.
func (e *env) checkOne(ctx context.Context, id string, sent []sentTurn) []string {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c := newTally()
	last := sent[len(sent)-1].turn
	err := e.client.Stream(ctx, id, 0, func(ev contract.Event) error {
		c.add(ev)
		if ev.TurnID == last && contract.Terminal(ev.Kind) {
			return errTurnEnded
		}
		return nil
	})
	if !errors.Is(err, errTurnEnded) {
		return []string{fmt.Sprintf("%s: reading its stream: %v", id, err)}
	}
	var problems []string
	if len(c.users) != len(sent) {
		problems = append(problems, fmt.Sprintf("%s holds %d user messages, %d were acknowledged", id, len(c.users), len(sent)))
	}
	for _, s := range sent {
		if c.users[s.text] != 1 || c.finished[s.turn] != 1 || !strings.Contains(c.replies[s.turn], s.text) {
			problems = append(problems, fmt.Sprintf("%s: %q is there %d times, its turn %s finished %d times with %q", id, s.text, c.users[s.text], s.turn, c.finished[s.turn], c.replies[s.turn]))
		}
	}
	return problems
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
	conversations, senderCount := replicaConversations, replicaSenders
	if v := os.Getenv("TALKIDE_E2E_CONVERSATIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("TALKIDE_E2E_CONVERSATIONS=%q: want a number of at least 100", v)
		}
		conversations = n
	}
	if conversations > replicaConversations {
		senderCount = 30
	}
	senders := e.senders(t, senderCount)

	empty := e.replicas(t)
	ids := make([]string, conversations)
	var created sync.WaitGroup
	var mu sync.Mutex
	var createErrs []error
	for s, se := range senders {
		created.Go(func() {
			for i := s; i < len(ids); i += len(senders) {
				id, err := se.tryConversation(t.Context())
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
	forwarded := 0.0
	for round := range 2 {
		start := time.Now()
		run(t.Context(), senders, l, ids, nil, 0)
		elapsed := time.Since(start)
		after := e.replicas(t)
		if len(after) != 3 {
			t.Fatalf("%d replicas answer, want 3", len(after))
		}
		for _, r := range after {
			n := r.since(before, seriesCommands)
			t.Logf("figure: round %d, replica %s: %.0f commands, %.1f per second, %.0f conversations open", round+1, r.pod,
				n, n/elapsed.Seconds(), r.metric(seriesOpen))
		}
		// Spread: no replica holds two thirds of what the three hold (a
		// replica that held many before may take none).
		open := grew(nil, after, seriesOpen)
		for _, r := range after {
			if r.metric(seriesOpen) > open*2/3 {
				t.Errorf("replica %s holds %.0f of the %.0f open conversations after round %d", r.pod, r.metric(seriesOpen), open, round+1)
			}
		}
		t.Logf("figure: round %d: %d turns in %s; forwarded to the holder %.0f, placed elsewhere %.0f, session_elsewhere %.0f",
			round+1, len(ids), elapsed.Round(time.Millisecond), grew(before, after, seriesHolder), grew(before, after, seriesPlacement), grew(before, after, seriesElsewhere))
		if n := grew(before, after, seriesElsewhere); n != 0 {
			t.Errorf("round %d: %.0f commands found no holder (session_elsewhere)", round+1, n)
		}
		forwarded += grew(before, after, seriesHolder)
		before = after
	}
	grown := grew(empty, before, seriesMemory) / grew(empty, before, seriesOpen)
	t.Logf("figure: %.1f KiB of resident memory per open conversation (the replicas' growth over %d conversations)", grown/1024, len(ids))
	if forwarded == 0 {
		t.Error("no command was forwarded to its holder: the Service sent every one to the holder by chance, or the replicas do not route")
	}
	check(t, senders, l)
	if t.Failed() {
		return
	}

	// Scaling during a load of turns: a quarter of the conversations keep
	// turning, the rest sit idle, and new ones start now and then.
	p50, p99, longest := l.turnTimes()
	t.Logf("figure: turns on 3 replicas took %s at p50, %s at p99, %s at the longest", p50, p99, longest)
	stop := make(chan struct{})
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		run(t.Context(), senders, l, ids[:len(ids)/4], stop, 10)
	}()
	time.Sleep(replicaSettle)
	e.scaleWorkers(t, 5)
	scaled := time.Now()
	for {
		rs := e.replicas(t)
		var empty []string
		for _, r := range rs {
			if r.metric(seriesOpen) == 0 {
				empty = append(empty, r.pod)
			}
		}
		if len(rs) == 5 && len(empty) == 0 {
			t.Logf("figure: %s after the fifth replica was ready, every replica holds conversations:", time.Since(scaled).Round(time.Second))
			for _, r := range rs {
				t.Logf("figure:   %s holds %.0f", r.pod, r.metric(seriesOpen))
			}
			break
		}
		if time.Since(scaled) > 2*time.Minute {
			t.Errorf("two minutes after scaling to 5, %d replicas answer and %v hold no conversation", len(rs), empty)
			break
		}
		time.Sleep(time.Second) // polling the new replicas' load
	}
	time.Sleep(replicaSettle)
	p50, p99, longest = l.turnTimes()
	t.Logf("figure: turns while scaling 3 → 5 took %s at p50, %s at p99, %s at the longest", p50, p99, longest)
	e.scaleWorkers(t, 2)
	time.Sleep(replicaSettle)
	close(stop)
	<-loaded
	p50, p99, longest = l.turnTimes()
	t.Logf("figure: turns while scaling 5 → 2 took %s at p50, %s at p99, %s at the longest (the longest: a conversation waiting for its holder's hand-over)", p50, p99, longest)
	turns := 0
	for _, s := range l.sent {
		turns += len(s)
	}
	t.Logf("figure: %d turns acknowledged in all, %d of them while scaling 3 → 5 → 2, %d conversations", turns, turns-2*len(ids), len(l.sent))
	check(t, senders, l)
	if t.Failed() {
		return
	}
	e.killedMidTurn(t, senders, l, ids[len(ids)/4:len(ids)/4+100])
}

// killedMidTurn kills, with no grace, the pod of the replica that runs a
// conversation's command: that turn ends worker_restarted and the
// conversation answers again once the dead replica's beats have ended,
// while each of the conversations others turns once more with nothing
// lost (l holds what was sent to them before).
func (e *env) killedMidTurn(t *testing.T, senders []*env, l *conversationLoad, others []string) {
	id, ctx, cancel, stream := e.followNew(t, 5*time.Minute)
	cut := e.bashRunning(t, ctx, stream, id, "echo started; sleep 300", 600000)
	holder := e.leaseHolder(t, id)
	e.kubectl(t, "-n", "acme-dev", "delete", "pod", holder, "--grace-period=0", "--force", "--wait=false")
	killed := time.Now()
	run(ctx, senders, l, others, nil, 0)
	p50, p99, longest := l.turnTimes()
	t.Logf("figure: turns of %d other conversations after %s was killed took %s at p50, %s at p99, %s at the longest", len(others), holder, p50, p99, longest)
	check(t, senders, l)

	failed := stream.await(t, "the cut turn's end", 3*time.Minute, func(ev contract.Event) bool {
		return ev.TurnID == cut.TurnID && contract.Terminal(ev.Kind)
	})
	if failed.Kind != contract.KindTurnFailed || failed.Failure == nil || failed.Failure.Code != contract.FailWorkerRestarted {
		t.Errorf("the cut turn ended %s %+v, want turn.failed %s", failed.Kind, failed.Failure, contract.FailWorkerRestarted)
	}
	next, err := e.client.Send(ctx, id, "after the replica's death")
	if err != nil {
		t.Fatal(err)
	}
	end := stream.await(t, "the next turn's end", 3*time.Minute, func(ev contract.Event) bool {
		return ev.TurnID == next.TurnID && contract.Terminal(ev.Kind)
	})
	t.Logf("figure: replica %s killed to its conversation answering on another: %s", holder, time.Since(killed).Round(100*time.Millisecond))
	if end.Kind != contract.KindTurnFinished {
		t.Errorf("the next turn ended %s", end.Kind)
	}
	if h := e.leaseHolder(t, id); h == holder {
		t.Errorf("the dead replica %s still holds %s", holder, id)
	}
	cancel()
	<-stream.done
	stream.exactlyOnce(t)
}

// leaseHolder reads, in a running worker pod, which replica holds
// conversation id's lease on the shared volume, and returns its pod's
// name (a holder is named host-pid, and a pod's host name is its name).
func (e *env) leaseHolder(t *testing.T, id string) string {
	t.Helper()
	pods := e.livePods(t)
	if len(pods) == 0 {
		t.Fatal("no running worker pod")
	}
	out := e.kubectl(t, "-n", "acme-dev", "exec", pods[0].name, "-c", "worker", "--",
		"sh", "-c", `cat "$(ls -d /data/claude/projects/`+id+`/lease/0* | tail -n 1)"`)
	var lease struct {
		Holder string `json:"holder"`
	}
	if err := json.Unmarshal([]byte(out), &lease); err != nil || lease.Holder == "" {
		t.Fatalf("the lease of %s: %q %v", id, out, err)
	}
	return lease.Holder[:max(strings.LastIndexByte(lease.Holder, '-'), 0)]
}
