package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/auth"
	"github.com/talkide/platform/internal/chatclient"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/proxytest"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/roundtrip"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/store"
	"github.com/talkide/platform/internal/store/postgres/pgtest"
	"github.com/talkide/platform/internal/syncbuf"
)

// replicaStack is several control-plane replicas on one PostgreSQL
// database and one secrets file, in front of one worker, each replica with
// a public and an internal listener of its own. Two balancers stand where a
// Service or a load balancer would: browsers and the terminal client reach
// the public listeners through one, the worker reaches the internal ones
// through the other; each connection goes to the next replica in turn, and
// past a dead one.
type replicaStack struct {
	t        *testing.T
	dir      string
	database string
	upstream string // the model simulator
	simKey   string
	logger   *slog.Logger
	// localUser, when set, is served without credentials on loopback (as
	// talkide dev's one user), for the browser; else callers bring API
	// tokens.
	localUser string
	tune      func(*roles.ControlPlaneConfig) // nil: the options as they are

	mu       sync.Mutex            // guards replicas
	replicas []*roles.ControlPlane // nil while killed
	// addrs are each replica's public and internal listener addresses,
	// kept across a restart so that the balancers find it again.
	addrs [][2]string

	public, internal *proxytest.Proxy
	worker           *roles.Worker
	projects         string
}

func startReplicaStack(t *testing.T, n int, logs io.Writer, localUser string) *replicaStack {
	t.Helper()
	return startReplicaStackWith(t, n, logs, localUser, nil)
}

// startReplicaStackWith is startReplicaStack with tune applied to each
// replica's options.
func startReplicaStackWith(t *testing.T, n int, logs io.Writer, localUser string, tune func(*roles.ControlPlaneConfig)) *replicaStack {
	t.Helper()
	rs := &replicaStack{
		t: t, dir: t.TempDir(), database: pgtest.URL(t), localUser: localUser, tune: tune,
		logger: debugLogger(logs),
	}
	rs.upstream, rs.simKey = startSimulator(t)
	rs.replicas = make([]*roles.ControlPlane, n)
	rs.addrs = make([][2]string, n)
	for i := range n {
		rs.addrs[i] = [2]string{"127.0.0.1:0", "127.0.0.1:0"}
		rs.start(i)
	}
	t.Cleanup(func() {
		for i := range rs.replicas {
			rs.stop(i)
		}
	})
	var pub, in []string
	for _, a := range rs.addrs {
		pub, in = append(pub, a[0]), append(in, a[1])
	}
	rs.public, rs.internal = proxytest.NewBalancer(t, pub...), proxytest.NewBalancer(t, in...)

	ctx := t.Context()
	st := rs.replicas[0].Store
	tokenPath := devIdentityToken(t, st, rs.dir)
	rs.projects = filepath.Join(rs.dir, "claude", "projects")
	cfg := devWorkerConfig("worker-1", rs.dir, rs.internal.URL(), tokenPath, rs.replicas[0].Secrets, rs.logger)
	// As talkide dev with the simulator: every conversation says so.
	cfg.Notices = []string{roles.SimulatorNotice}
	cfg.Logger = rs.logger.With("proc", "worker")
	rs.worker = startT(t, roles.StartWorker, cfg)
	if err := st.PutEnv(ctx, store.Env{Tenant: roles.DevTenant, Name: roles.DevEnv, WorkerURL: rs.worker.HTTP.URL(), CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	return rs
}

// start starts replica i on its addresses (new ones the first time).
func (rs *replicaStack) start(i int) {
	rs.t.Helper()
	o := roles.ControlPlaneConfig{
		Listen: rs.addrs[i][0], InternalListen: rs.addrs[i][1],
		Database: rs.database, SecretsPath: filepath.Join(rs.dir, "secrets.json"),
		Upstream: rs.upstream, APIKey: rs.simKey, Tenant: roles.DevTenant, Env: roles.DevEnv, LocalUser: rs.localUser,
		Logger: rs.logger.With("proc", fmt.Sprintf("cp-%d", i)),
	}
	if rs.tune != nil {
		rs.tune(&o)
	}
	cp, err := roles.StartControlPlane(context.Background(), o)
	if err != nil {
		rs.t.Fatalf("replica %d: %v", i, err)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.replicas[i] = cp
	rs.addrs[i] = [2]string{cp.HTTP.Addr().String(), cp.Internal.Addr().String()}
}

// kill takes replica i away as a crash does for its clients: its listeners
// close and every connection is cut at once, streams mid-event included;
// nothing is drained or handed over. What it kept in memory is gone with it
// (its store connections and background work are released afterwards, so
// that the test leaves nothing running).
func (rs *replicaStack) kill(i int) {
	rs.mu.Lock()
	cp := rs.replicas[i]
	rs.replicas[i] = nil
	rs.mu.Unlock()
	cp.HTTP.Close()
	cp.Internal.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp.Stop(ctx)
}

func (rs *replicaStack) stop(i int) {
	rs.mu.Lock()
	cp := rs.replicas[i]
	rs.replicas[i] = nil
	rs.mu.Unlock()
	if cp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp.Stop(ctx)
}

// streaming returns the replica serving browser streams now, or -1.
func (rs *replicaStack) streaming() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i, cp := range rs.replicas {
		if cp != nil && cp.Server.StreamsOpen() > 0 {
			return i
		}
	}
	return -1
}

// url is replica i's own public address, past the balancer.
func (rs *replicaStack) url(i int) string { return "http://" + rs.addrs[i][0] }

// addUser adds a member of the dev tenant-env and returns an API token of
// theirs.
func (rs *replicaStack) addUser(id string) string {
	rs.t.Helper()
	ctx, st, now := rs.t.Context(), rs.replicas[0].Store, time.Now().UTC()
	must(rs.t, st.PutUser(ctx, store.User{ID: id, Name: id, CreatedAt: now}))
	_, err := st.PutMembership(ctx, store.Membership{UserID: id, Tenant: roles.DevTenant, Env: roles.DevEnv, Role: store.RoleMember, CreatedAt: now})
	must(rs.t, err)
	tok, _, err := auth.IssueAPIToken(ctx, st, id, "replicas", time.Hour, now)
	must(rs.t, err)
	return tok
}

// wireEvent is one event of a browser stream as it crossed the wire: the
// SSE id and the raw data, and which connection brought it.
type wireEvent struct {
	conn int
	id   string
	data []byte
	ev   contract.Event
}

// wireRecorder is an http.RoundTripper that records every event of every
// event-stream answer as the client reads it, before the client's own
// de-duplication could hide a repeated event. It also signals when an
// event matching a condition has arrived.
type wireRecorder struct {
	next http.RoundTripper

	mu     sync.Mutex
	conns  int
	events []wireEvent
	wait   func(contract.Event) bool
	seen   chan struct{}
}

func (r *wireRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/stream") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	r.mu.Lock()
	r.conns++
	conn := r.conns
	r.mu.Unlock()
	pr, pw := io.Pipe()
	body := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{pr, closerFunc(func() error { pr.Close(); return body.Close() })}
	// What the client reads passes through a tee into a parser of our
	// own: the client sees the bytes exactly as they came.
	go func() {
		tee := io.TeeReader(body, pw)
		sr := sse.NewReader(bufio.NewReader(tee), 4<<20)
		for {
			e, err := sr.Next()
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			var ev contract.Event
			json.Unmarshal(e.Data, &ev)
			r.mu.Lock()
			r.events = append(r.events, wireEvent{conn: conn, id: e.ID, data: bytes.Clone(e.Data), ev: ev})
			if r.wait != nil && r.wait(ev) {
				r.wait = nil
				close(r.seen)
			}
			r.mu.Unlock()
		}
	}()
	return resp, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// await returns a channel closed when an event matching cond arrives.
func (r *wireRecorder) await(cond func(contract.Event) bool) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wait, r.seen = cond, make(chan struct{})
	return r.seen
}

func (r *wireRecorder) recorded() (conns int, evs []wireEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns, append([]wireEvent(nil), r.events...)
}

// toolOutput matches the tool.output chunk that holds s.
func toolOutput(s string) func(contract.Event) bool {
	return func(ev contract.Event) bool {
		return ev.Kind == contract.KindToolOutput && ev.Tool != nil && strings.Contains(ev.Tool.Output, s)
	}
}

// TestReplicaKilledMidStream: two control-plane replicas on one PostgreSQL
// and one worker, behind a round-robin balancer. The terminal client
// starts a turn with slow output; the replica relaying its stream is killed
// mid-stream; the client reconnects through the balancer to the other
// replica with Last-Event-ID and the turn finishes. What crossed the wire
// is the worker's log after the client's starting point, byte for byte,
// each event once and none missing. Then, with the killed replica back,
// the things that must not be one replica's own: a message sent twice with
// one client message id, once through each replica, is one turn; an
// interrupt sent through one replica stops the turn that a stream on the
// other relays.
func TestReplicaKilledMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two control-planes and a worker")
	}
	logs := failureLogs(t)
	rs := startReplicaStack(t, 2, logs, "")
	token := rs.addUser("alice")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	rec := &wireRecorder{next: http.DefaultTransport.(*http.Transport).Clone()}
	client, err := chatclient.New(rs.public.URL(), &chatclient.Options{Token: token, HTTPClient: &http.Client{Transport: rec},
		Logger: rs.logger.With("proc", "chat")})
	must(t, err)
	conv, err := client.CreateConversation(ctx, "replicated", "")
	must(t, err)
	if conv.State == nil {
		t.Fatalf("created without a session state: %+v", conv)
	}
	var out syncbuf.Buffer
	sess := &chatclient.Session{Client: client, ConversationID: conv.ID, After: conv.State.LastSeq,
		Renderer: &chatclient.Renderer{W: &out, Verbose: true}}

	const lines = 12
	mid := rec.await(toolOutput("line3"))
	killed := make(chan int, 1)
	go func() {
		select {
		case <-mid:
		case <-ctx.Done():
			killed <- -1
			return
		}
		i := rs.streaming()
		if i >= 0 {
			rs.kill(i)
		}
		killed <- i
	}()
	err = sess.Once(ctx, fmt.Sprintf(`Count slowly. [[tool:Bash {"command":"for i in $(seq 1 %d); do echo line$i; sleep 0.25; done"}]]`, lines))
	if err != nil {
		t.Fatalf("the turn across the kill: %v", err)
	}
	victim := <-killed
	if victim < 0 {
		t.Fatal("no replica was serving the stream when the output had reached line3")
	}
	survivor := 1 - victim
	conns, wire := rec.recorded()
	if conns < 2 {
		t.Fatalf("the client opened %d stream connections; the kill did not cut its stream", conns)
	}
	t.Logf("killed replica %d mid-stream; %d stream connections, %d events", victim, conns, len(wire))
	for i := 1; i <= lines; i++ {
		if !strings.Contains(out.String(), "line"+strconv.Itoa(i)+"\n") {
			t.Errorf("the client's output lacks line%d:\n%s", i, out.String())
		}
	}

	// What crossed the wire is the worker's log after the client's
	// starting point up to the turn's end: every event once, in order,
	// byte for byte, across both replicas.
	l, err := readSession(rs.projects, conv.ID)
	must(t, err)
	want := conv.State.LastSeq
	for _, w := range wire {
		want++
		if w.id != strconv.FormatInt(w.ev.Seq, 10) || w.ev.Seq != want {
			t.Fatalf("connection %d brought event id %q seq %d, want seq %d (no gap, no duplicate)", w.conn, w.id, w.ev.Seq, want)
		}
		if !bytes.Equal(w.data, l.raw[w.ev.Seq]) {
			t.Fatalf("event %d differs:\nstreamed %s\nlog      %s", w.ev.Seq, w.data, l.raw[w.ev.Seq])
		}
	}
	last := wire[len(wire)-1].ev
	if last.Kind != contract.KindTurnFinished || last.Seq != l.v.LastSeq {
		t.Fatalf("the wire ends with %s at %d; the log's last event is %d (want the turn's turn.finished)", last.Kind, last.Seq, l.v.LastSeq)
	}
	if byConn := wire[len(wire)-1].conn; byConn == wire[0].conn {
		t.Fatalf("every event came on connection %d", byConn)
	}

	// The killed replica comes back on its addresses; the survivor served
	// on meanwhile.
	rs.start(victim)

	// One client message id sent through each replica is one turn.
	msg := controlplane.SendRequest{ClientMessageID: "m-twice", Text: `Again. [[tool:Bash {"command":"echo started; sleep 30"}]]`}
	first := sendAs(t, rs.url(survivor), conv.ID, token, msg)
	// The restarted replica neither forwarded that message nor relays the
	// conversation: its list learns of the turn from the worker.
	if st := listStatusAs(t, rs.url(victim), token)[conv.ID]; st != contract.StatusRunning+":"+first.TurnID {
		t.Errorf("replica %d lists the conversation as %q while turn %s runs", victim, st, first.TurnID)
	}
	second := sendAs(t, rs.url(victim), conv.ID, token, msg)
	if first.TurnID == "" || second.TurnID != first.TurnID || !second.Duplicate {
		t.Fatalf("the same client message id through two replicas: %+v then %+v; want one turn", first, second)
	}
	// A stream on one replica, the interrupt through the other.
	got := make(chan []streamed, 1)
	started := make(chan struct{})
	go func() {
		var once sync.Once
		got <- streamAs(ctx, t, rs.url(victim), conv.ID, token, last.Seq, func(ev contract.Event) bool {
			if toolOutput("started")(ev) {
				once.Do(func() { close(started) })
			}
			return ev.TurnID == first.TurnID && contract.Terminal(ev.Kind)
		})
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the second turn's tool never started")
	}
	ir := interruptAs(t, rs.url(survivor), conv.ID, token)
	if !ir.Interrupted || ir.TurnID != first.TurnID {
		t.Fatalf("interrupt through replica %d: %+v", survivor, ir)
	}
	evs := <-got
	if len(evs) == 0 {
		t.FailNow()
	}
	end := evs[len(evs)-1].ev
	if end.Kind != contract.KindTurnFailed || end.Failure == nil || end.Failure.Code != contract.FailInterrupted {
		t.Fatalf("the turn interrupted through the other replica ended with %+v", end)
	}
	users := 0
	l, err = readSession(rs.projects, conv.ID)
	must(t, err)
	for _, ev := range l.events {
		if ev.Kind == contract.KindUserMessage && ev.ClientMessageID == msg.ClientMessageID {
			users++
		}
	}
	if users != 1 {
		t.Fatalf("the log holds %d user messages with client message id %s", users, msg.ClientMessageID)
	}
}

// sendAs posts a message as the holder of token to the control-plane at
// base.
func sendAs(t *testing.T, base, conv, token string, msg controlplane.SendRequest) contract.SendMessageResponse {
	t.Helper()
	var r contract.SendMessageResponse
	postAs(t, base+"/api/conversations/"+conv+"/messages", token, msg, &r)
	return r
}

func interruptAs(t *testing.T, base, conv, token string) contract.InterruptResponse {
	t.Helper()
	var r contract.InterruptResponse
	postAs(t, base+"/api/conversations/"+conv+"/interrupt", token, nil, &r)
	return r
}

// listStatusAs is each conversation's status in the list at base, as the
// holder of token sees it: "idle", or "running:" and the turn.
func listStatusAs(t *testing.T, base, token string) map[string]string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/conversations", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, data := roundtrip.Do(t, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/api/conversations: %d %s", base, resp.StatusCode, data)
	}
	var l struct {
		Conversations []controlplane.ConversationView `json:"conversations"`
	}
	must(t, json.Unmarshal([]byte(data), &l))
	out := map[string]string{}
	for _, c := range l.Conversations {
		out[c.ID] = c.Status
		if c.Status == contract.StatusRunning {
			out[c.ID] += ":" + c.RunningTurnID
		}
	}
	return out
}

func postAs(t *testing.T, url, token string, in, out any) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, body)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, data := roundtrip.Do(t, req)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, data)
	}
	must(t, json.Unmarshal([]byte(data), out))
}

// streamAs follows a conversation's stream at base as the holder of token
// from after until stop says so. It runs in a goroutine of its own: it
// reports failures with Errorf and returns what it got.
func streamAs(ctx context.Context, t *testing.T, base, conv, token string, after int64, stop func(contract.Event) bool) []streamed {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/conversations/"+conv+"/stream", nil)
	req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("stream: %v", err)
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("stream: status %d", resp.StatusCode)
		return nil
	}
	r := sse.NewReader(resp.Body, 1<<20)
	var got []streamed
	for {
		e, err := r.Next()
		if err != nil {
			t.Errorf("stream ended after %d events: %v", len(got), err)
			return got
		}
		var ev contract.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			t.Errorf("event data: %v", err)
		}
		got = append(got, streamed{id: e.ID, ev: ev})
		if stop(ev) {
			return got
		}
	}
}

// TestBrowserReplicaKilled: the web UI in headless Chromium, through the
// balancer to two replicas; the replica relaying its stream is killed
// mid-turn (the restart scenario's step, with no restart: the other
// replica serves on). The page reconnects with Last-Event-ID, the turn
// finishes, and its output is whole with no event applied twice.
func TestBrowserReplicaKilled(t *testing.T) {
	browserParallel(t)
	logs := failureLogs(t)
	rs := startReplicaStack(t, 2, logs, roles.DevUser)
	runScenario(t, &roles.Dev{Info: roles.DevInfo{ControlPlane: rs.public.URL()}}, "restart", func(step string) {
		if step != "restart-controlplane" {
			t.Errorf("unexpected step %q", step)
			return
		}
		killed := rs.streaming()
		if killed < 0 {
			t.Error("no replica serves the page's stream")
			return
		}
		rs.kill(killed)
	})
}
