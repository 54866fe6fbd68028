package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/replicaset"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/sessionstore"
)

// roundRobin stands where the worker Deployment's Service does: each
// request goes to the next replica in turn, whatever conversation it is
// about.
type roundRobin struct {
	srv *httptest.Server

	mu      sync.Mutex
	targets []*url.URL // guarded by mu
	next    int        // guarded by mu
}

func newRoundRobin(t *testing.T) *roundRobin {
	rr := &roundRobin{}
	rr.srv = httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		rr.mu.Lock()
		target := rr.targets[rr.next%len(rr.targets)]
		rr.next++
		rr.mu.Unlock()
		pr.SetURL(target)
	}})
	t.Cleanup(rr.srv.Close)
	return rr
}

func (rr *roundRobin) set(urls ...string) {
	var targets []*url.URL
	for _, u := range urls {
		p, _ := url.Parse(u)
		targets = append(targets, p)
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.targets = targets
}

// TestReplicasRouteConversations runs three worker replicas on one
// session volume behind a round-robin front, as a Deployment behind its
// Service: 90 conversations are created and sent messages through the
// front, and every command is answered the first time, by the replica
// holding its conversation (forwarded there when it landed elsewhere);
// the conversations spread over the three. A fourth replica joins and
// takes new conversations and, once they are idle, some of the others'.
// One replica then drains while turns run on it: they finish, its idle
// conversations move, and every later command succeeds at once. No
// transcript loses or repeats a message.
func TestReplicasRouteConversations(t *testing.T) {
	ctx := context.Background()
	cp, dir, logger := startDevControlPlane(t)
	tokenPath := devIdentityToken(t, cp.Store, dir)
	projects := filepath.Join(dir, "claude", "projects")
	front := newRoundRobin(t)
	type replica struct {
		name string
		proc *roles.Worker
	}
	var (
		mu       sync.Mutex // guards replicas
		replicas []replica
	)
	start := func(name string) replica {
		t.Helper()
		cfg := devWorkerConfig(name, dir, cp.HTTP.URL(), tokenPath, cp.Secrets, logger)
		cfg.AdvertiseHost = "127.0.0.1"
		cfg.LeaseTTL = twoWorkerLeaseTTL // a maintenance pass, and so a rebalance, every 2 s
		cfg.ReplicaInterval = 200 * time.Millisecond
		cfg.RebalanceIdle = 500 * time.Millisecond
		r := replica{name, startT(t, roles.StartWorker, cfg)}
		mu.Lock()
		defer mu.Unlock()
		replicas = append(replicas, r)
		var urls []string
		for _, r := range replicas {
			urls = append(urls, r.proc.HTTP.URL())
		}
		front.set(urls...)
		return r
	}
	for _, name := range []string{"replica-a", "replica-b", "replica-c"} {
		start(name)
	}
	key := devCommandKey(cp.Secrets)
	client := newCommandClient("front", front.srv.URL, key)
	sessions, err := sessionstore.New(projects, nil)
	must(t, err)
	holder := func(id string) string {
		li, err := sessions.Lease(id)
		if err != nil || !li.Live(time.Now()) {
			return ""
		}
		return li.Holder
	}
	held := func() map[string]int {
		n := map[string]int{}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range replicas {
			n[r.name] = r.proc.Worker.Load().OpenSessions
		}
		return n
	}

	var convs []string
	sent := map[string]int{} // messages sent to each conversation
	var sentMu sync.Mutex
	// exchange sends a message to each of ids through the front and waits
	// for its turn, eight conversations at a time; any refusal fails.
	exchange := func(ids []string, round string) {
		t.Helper()
		work := make(chan string)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for id := range work {
					msg := fmt.Sprintf("m-%s-%s", id, round)
					r, err := client.sendOK(ctx, id, msg, "message "+round)
					if err != nil {
						t.Errorf("%s (holder %q): %v", id, holder(id), err)
						continue
					}
					if _, err := client.waitTurn(ctx, id, r.Seq, r.TurnID); err != nil {
						t.Errorf("%s: %v", id, err)
						continue
					}
					sentMu.Lock()
					sent[id]++
					sentMu.Unlock()
				}
			})
		}
		for _, id := range ids {
			work <- id
		}
		close(work)
		wg.Wait()
	}
	create := func(ids ...string) {
		t.Helper()
		knownConversations(t, cp.Store, ids...)
		for _, id := range ids {
			if st, code := client.create(ctx, id); st != http.StatusCreated {
				t.Fatalf("create %s: %d %s", id, st, code)
			}
		}
		convs = append(convs, ids...)
	}
	batch := func(prefix string, n int) []string {
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("%s-%02d", prefix, i))
		}
		return ids
	}

	// Sizes that make the spreading below certain, not likely: the busiest
	// of three holds at least 30, and the mean over four, with the 6 new
	// conversations, is 24, so it holds more than the mean and the slack.
	first := batch("conv", 90)
	create(first...)
	exchange(first, "1")
	exchange(first, "2")
	if t.Failed() {
		t.FailNow()
	}
	counts := held()
	t.Logf("three replicas hold %v", counts)
	for name, n := range counts {
		if n == 0 {
			t.Errorf("%s holds no conversation: %v", name, counts)
		}
	}

	// A fourth replica joins; once every replica has read it in the
	// registry, new conversations go to it first.
	d := start("replica-d")
	probe, err := replicaset.New(filepath.Join(dir, "claude", "replicas"), "probe", &replicaset.Options{Interval: 200 * time.Millisecond})
	must(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		es, err := probe.Read()
		must(t, err)
		byName := map[string]replicaset.Entry{}
		for _, e := range es {
			byName[e.Holder] = e
		}
		seen := byName["replica-d"].UpdatedAt
		if !seen.IsZero() && !slices.ContainsFunc(es, func(e replicaset.Entry) bool { return !e.UpdatedAt.After(seen) && e.Holder != "replica-d" }) && len(es) == 4 {
			break // each has published, and so read, since d's first entry
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry never showed all four replicas: %+v", es)
		}
		time.Sleep(50 * time.Millisecond)
	}
	second := batch("new", 6)
	create(second...)
	if n := d.proc.Worker.Load().OpenSessions; n == 0 {
		t.Fatalf("the new replica received none of %d new conversations: %v", len(second), held())
	}
	// The others release idle conversations down to the mean; each moves
	// at its next command.
	deadline = time.Now().Add(30 * time.Second)
	var released int64
	for released == 0 {
		for _, r := range replicas {
			released += r.proc.Worker.Load().ReleasedRebalance
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica released an idle conversation to the new one: %v", held())
		}
		time.Sleep(100 * time.Millisecond)
	}
	dBefore := d.proc.Worker.Load().OpenSessions
	exchange(convs, "3")
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("after the fourth joined: %v (%d released to spread the load)", held(), released)
	if n := d.proc.Worker.Load().OpenSessions; n <= dBefore {
		t.Errorf("the new replica took no released conversation: %d, %d before", n, dBefore)
	}

	// Replica b drains while a turn runs on it: the front stops sending it
	// new requests (as endpoints drop a terminating pod), its running turn
	// ends, its idle conversations move, and every later command succeeds
	// the first time.
	b := replicas[1]
	var busy string
	for _, id := range convs {
		if holder(id) == b.name {
			busy = id
			break
		}
	}
	if busy == "" {
		t.Fatalf("b holds no conversation: %v", held())
	}
	long, err := client.sendOK(ctx, busy, "m-long", `take your time [[tool:Bash {"command":"sleep 1.5; echo finished-in-grace"}]]`)
	must(t, err)
	if _, err := client.waitEvent(ctx, busy, long.Seq, func(ev contract.Event) bool { return ev.Kind == contract.KindToolStarted }); err != nil {
		t.Fatalf("the long turn's tool did not start: %v", err)
	}
	mu.Lock()
	var urls []string
	for _, r := range replicas {
		if r.name != b.name {
			urls = append(urls, r.proc.HTTP.URL())
		}
	}
	mu.Unlock()
	front.set(urls...)
	drained := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		drained <- b.proc.Stop(sctx)
	}()
	end, err := client.waitEvent(ctx, busy, long.Seq, func(ev contract.Event) bool { return ev.TurnID == long.TurnID && contract.Terminal(ev.Kind) })
	if err != nil || end[len(end)-1].Kind != contract.KindTurnFinished {
		t.Fatalf("the turn running on the draining replica: %v %+v", err, end)
	}
	sentMu.Lock()
	sent[busy]++
	sentMu.Unlock()
	if err := <-drained; err != nil {
		t.Fatalf("b's drain: %v", err)
	}
	if got := b.proc.Worker.Load(); got.ReleasedDrain == 0 {
		t.Errorf("b handed nothing over at its drain: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "claude", "replicas", b.name+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b's registry entry outlived its drain: %v", err)
	}
	exchange(convs, "4")
	t.Logf("after b drained: %v", held())

	var forwarded, placed, elsewhere int64
	for _, r := range replicas {
		l := r.proc.Worker.Load()
		forwarded += l.ForwardedHolder
		placed += l.ForwardedPlacement
		elsewhere += l.Elsewhere
	}
	t.Logf("forwarded to the holder %d, for placement %d; session_elsewhere %d", forwarded, placed, elsewhere)
	if forwarded == 0 || placed == 0 {
		t.Errorf("forwarded to the holder %d, for placement %d: want both", forwarded, placed)
	}
	if elsewhere != 0 {
		t.Errorf("%d commands reached no holder (session_elsewhere)", elsewhere)
	}
	for _, id := range convs {
		checkSharedSession(t, projects, id, false)
		l, err := readSession(projects, id)
		must(t, err)
		seen := map[string]bool{}
		for _, ev := range l.events {
			if ev.Kind != contract.KindUserMessage {
				continue
			}
			if seen[ev.ClientMessageID] {
				t.Errorf("%s: message %s twice", id, ev.ClientMessageID)
			}
			seen[ev.ClientMessageID] = true
		}
		if len(seen) != sent[id] {
			t.Errorf("%s: %d user messages in the log, %d sent", id, len(seen), sent[id])
		}
	}
}
