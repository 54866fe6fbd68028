package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/controlplane"
	"github.com/talkide/platform/internal/harness/historytest"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/sse"
	"github.com/talkide/platform/internal/store/sqlite"
	"github.com/talkide/platform/internal/syncbuf"
)

var (
	killIterations = flag.Int("killnine.iterations", 5, "how many times TestKillNine kills talkide dev (the full run is 100)")
	killSeed       = flag.Int64("killnine.seed", 0, "seed of TestKillNine's kill points and messages (0: from the clock)")
)

// killConversations is how many conversations TestKillNine drives at once.
const killConversations = 3

// TestKillNine runs the real talkide dev binary under load from several
// conversations and kills it with SIGKILL at a random moment, over and over,
// on the same data directory. After every kill it checks the session volume:
// every session validates (records, seq continuity, one turn at a time);
// every event a client had received is in the log with the same content;
// every transcript is a valid Messages API conversation; a turn the kill
// cut off ends, after the restart, with turn.failed(worker_restarted). At
// the end it stops the binary gracefully and checks that every report of
// every outbox is in the control-plane's database exactly once.
//
// The full run: go test ./cmd/talkide -run TestKillNine -killnine.iterations=100 -timeout 30m
func TestKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	seed := *killSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (repeat with -killnine.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	dir := t.TempDir()
	bin := talkideBinary(t)
	data := filepath.Join(dir, "data")
	projects := filepath.Join(data, "claude", "projects")
	convs := make([]*followedConversation, killConversations)
	for i := range convs {
		convs[i] = &followedConversation{id: fmt.Sprintf("kill-%d", i), received: map[int64][]byte{}, ended: map[string]bool{}, changed: make(chan struct{})}
	}
	cut := map[string]string{} // conversation → the turn open when it was last killed
	var cutTurns, turnsSeen int

	for i := 0; i < *killIterations; i++ {
		p := startDevBinary(t, bin, data)
		if i == 0 {
			for _, c := range convs {
				if st, err := postJSON(context.Background(), p.info.ControlPlane+"/api/conversations", map[string]string{"id": c.id, "title": "kill -9"}, nil); err != nil || st != http.StatusCreated {
					t.Fatalf("create %s: %d %v", c.id, st, err)
				}
			}
		}
		opened := waitSessionsOpen(t, p, convs)

		ctx, cancel := context.WithCancel(context.Background())
		var killed atomic.Bool
		var wg sync.WaitGroup
		for _, c := range convs {
			crng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
			wg.Go(func() { c.follow(ctx, p.info.ControlPlane) })
			wg.Go(func() { c.drive(ctx, p.info.ControlPlane, crng, &killed) })
		}
		delay := time.Duration(50+rng.IntN(751)) * time.Millisecond
		time.Sleep(delay) // the random kill point, not a synchronisation
		killed.Store(true)
		p.kill(t)
		cancel()
		wg.Wait()

		before := turnsSeen
		turnsSeen = 0
		for _, c := range convs {
			c.mu.Lock()
			turnsSeen += len(c.ended)
			for _, e := range c.errs {
				t.Errorf("iteration %d: %s: %s", i, c.id, e)
			}
			c.errs = nil
			c.mu.Unlock()
		}
		n, lag := checkKilledVolume(t, projects, convs, cut, false)
		cutTurns += n
		t.Logf("iteration %d: sessions opened in %v, killed after %v, %d turns ended at the clients, %d cut off, at most %d events after a checkpoint",
			i, opened.Round(time.Millisecond), delay, turnsSeen-before, n, lag)
		if race := p.races(); race != "" {
			t.Errorf("iteration %d: the binary reported a data race:\n%s", i, race)
		}
		if t.Failed() {
			t.Logf("talkide dev's log:\n%s", p.tail())
			return
		}
	}

	// The last restart: every session opens, one more turn each (which
	// makes the harness answer a tool call a kill left open), then a
	// graceful stop that delivers the last reports.
	p := startDevBinary(t, bin, data)
	waitSessionsOpen(t, p, convs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range convs {
		wg.Go(func() { c.follow(ctx, p.info.ControlPlane) })
	}
	for _, c := range convs {
		turn, err := c.send(ctx, p.info.ControlPlane, "the last message after the kills")
		if err != nil {
			t.Fatalf("%s: last message: %v\n%s", c.id, err, p.tail())
		}
		if !c.waitEnded(ctx, turn) {
			t.Fatalf("%s: the last turn did not end\n%s", c.id, p.tail())
		}
	}
	waitReportsDelivered(t, projects, convs)
	cancel()
	wg.Wait()
	p.stop(t)
	checkKilledVolume(t, projects, convs, cut, true)
	checkReportsStored(t, filepath.Join(data, "controlplane.db"), projects, convs)
	t.Logf("%d kills, %d turns cut off, %d turns ended at the clients", *killIterations, cutTurns, turnsSeen)
}

// maxAfterCheckpoint bounds the events after a session's checkpoint when it
// is killed: a checkpoint is due every 512 events, and a turn ends with a
// sync that can write it.
const maxAfterCheckpoint = 2048

// checkKilledVolume checks every conversation's session after a kill (or,
// with final, after the graceful stop) and returns how many turns this kill
// cut off and the most events a session has after its checkpoint. cut
// carries the turns open at the previous kill.
func checkKilledVolume(t *testing.T, projects string, convs []*followedConversation, cut map[string]string, final bool) (n int, lag int64) {
	t.Helper()
	for _, c := range convs {
		l, err := readSession(projects, c.id)
		if err != nil {
			t.Errorf("%s: %v", c.id, err)
			continue
		}
		if l.v.Stale != 0 {
			t.Errorf("%s: %d records written under a stale fence", c.id, l.v.Stale)
		}
		if l.v.AfterCheckpoint > maxAfterCheckpoint {
			t.Errorf("%s: %d events after the checkpoint: reopening reads more and more", c.id, l.v.AfterCheckpoint)
		}
		lag = max(lag, l.v.AfterCheckpoint)
		if l.v.TornBytes != 0 {
			t.Logf("%s: a torn tail of %d bytes (cut on the next open)", c.id, l.v.TornBytes)
		}
		// Every event a client received is in the log, the same.
		c.mu.Lock()
		for seq, got := range c.received {
			want, ok := l.raw[seq]
			switch {
			case !ok:
				t.Errorf("%s: event %d was streamed to the client but is not in the log (last seq %d): %s", c.id, seq, l.v.LastSeq, got)
			case !bytes.Equal(got, want):
				t.Errorf("%s: event %d differs:\nstreamed %s\nlog      %s", c.id, seq, got, want)
			}
		}
		c.mu.Unlock()
		if err := historytest.Check(l.transcript, !final); err != nil {
			t.Errorf("%s: transcript: %v", c.id, err)
		}
		_, end := l.turns()
		if prev := cut[c.id]; prev != "" {
			ev := end[prev]
			if ev == nil || ev.Kind != contract.KindTurnFailed || ev.Failure == nil || ev.Failure.Code != contract.FailWorkerRestarted {
				t.Errorf("%s: turn %s, cut off by a kill, ended with %+v after the restart, want turn.failed(%s)", c.id, prev, ev, contract.FailWorkerRestarted)
			}
		}
		if final && l.v.OpenTurn != "" {
			t.Errorf("%s: turn %s is still open after a graceful stop", c.id, l.v.OpenTurn)
		}
		cut[c.id] = l.v.OpenTurn
		if l.v.OpenTurn != "" {
			n++
		}
	}
	return n, lag
}

// waitReportsDelivered waits (bounded) until every outbox is acknowledged.
func waitReportsDelivered(t *testing.T, projects string, convs []*followedConversation) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pending := 0
		for _, c := range convs {
			l, err := readSession(projects, c.id)
			if err != nil {
				t.Fatalf("%s: %v", c.id, err)
			}
			pending += l.pending
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reports still undelivered after 30 s", pending)
		}
		time.Sleep(50 * time.Millisecond) // polling files another process writes
	}
}

// checkReportsStored opens the control-plane's database (talkide dev has
// stopped) and checks it against the outboxes.
func checkReportsStored(t *testing.T, dbPath, projects string, convs []*followedConversation) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), dbPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ids []string
	for _, c := range convs {
		ids = append(ids, c.id)
	}
	checkReports(t, db, projects, ids)
}

// devBinary is a running talkide dev process.
type devBinary struct {
	cmd    *exec.Cmd
	info   roles.DevInfo
	stderr *syncbuf.Buffer
	done   chan error
}

// startDevBinary starts talkide dev on data and waits for the dev.json it
// writes.
func startDevBinary(t *testing.T, bin, data string) *devBinary {
	t.Helper()
	os.Remove(filepath.Join(data, "dev.json"))
	p := &devBinary{stderr: &syncbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "dev", "--data-dir", data, "--addr", "127.0.0.1:0")
	p.cmd.Stdout, p.cmd.Stderr = io.Discard, p.stderr
	p.cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=", "GORACE=exitcode=66")
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(data, "dev.json"))
		if err == nil && json.Unmarshal(b, &p.info) == nil {
			return p
		}
		select {
		case err := <-p.done:
			t.Fatalf("talkide dev exited at start: %v\n%s", err, p.stderr.String())
		case <-time.After(20 * time.Millisecond): // polling a file another process writes
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dev.json after 30 s:\n%s", p.stderr.String())
		}
	}
}

func (p *devBinary) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// stop sends SIGTERM and expects a clean exit.
func (p *devBinary) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("talkide dev exited with %v:\n%s", err, p.tail())
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("talkide dev did not exit within 45 s of SIGTERM:\n%s", p.tail())
	}
}

// races returns the data race reports of a binary built with -race.
func (p *devBinary) races() string {
	s := p.stderr.String()
	if i := strings.Index(s, "WARNING: DATA RACE"); i >= 0 {
		return s[i:]
	}
	return ""
}

// tail is the end of the process's log.
func (p *devBinary) tail() string {
	s := p.stderr.String()
	if len(s) > 8000 {
		s = "…" + s[len(s)-8000:]
	}
	return s
}

// waitSessionsOpen asks the control-plane for every conversation's state
// until the worker answers for all of them (a restarted worker must open
// every session at once), and returns how long that took.
func waitSessionsOpen(t *testing.T, p *devBinary, convs []*followedConversation) time.Duration {
	t.Helper()
	start := time.Now()
	for _, c := range convs {
		for {
			var view controlplane.ConversationView
			st, err := getJSON(context.Background(), p.info.ControlPlane+"/api/conversations/"+c.id, &view)
			if err == nil && st == http.StatusOK && view.State != nil {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("%s: the session did not open within 10 s of the restart: status %d, %v, worker error %q\n%s", c.id, st, err, view.WorkerError, p.tail())
			}
			time.Sleep(20 * time.Millisecond) // retrying a refused request
		}
	}
	return time.Since(start)
}

// followedConversation is one conversation as a browser client sees it: the
// events it received by seq, across every restart.
type followedConversation struct {
	id string

	mu sync.Mutex
	// guarded by mu
	received map[int64][]byte // event JSON by seq
	last     int64            // the Last-Event-ID to resume from
	ended    map[string]bool  // turns whose terminal event arrived
	changed  chan struct{}    // closed (and replaced) when a turn ends
	errs     []string
}

func (c *followedConversation) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// follow reads the conversation's browser stream until ctx ends,
// reconnecting with Last-Event-ID after every break.
func (c *followedConversation) follow(ctx context.Context, base string) {
	for ctx.Err() == nil {
		c.streamOnce(ctx, base)
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond): // reconnect backoff
		}
	}
}

func (c *followedConversation) streamOnce(ctx context.Context, base string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/conversations/"+c.id+"/stream", nil)
	c.mu.Lock()
	if c.last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(c.last, 10))
	}
	c.mu.Unlock()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	r := sse.NewReader(bufio.NewReader(resp.Body), 1<<20)
	for {
		e, err := r.Next()
		if err != nil {
			return
		}
		seq, err := strconv.ParseInt(e.ID, 10, 64)
		if err != nil {
			c.fail("an event without a numeric id: %q", e.ID)
			return
		}
		var ev contract.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil || ev.Seq != seq || ev.Kind != e.Event {
			c.fail("event %d: id, kind and data disagree: %s %s (%v)", seq, e.Event, e.Data, err)
			return
		}
		c.mu.Lock()
		if seq != c.last+1 {
			c.errs = append(c.errs, fmt.Sprintf("received seq %d after %d: a gap or a duplicate", seq, c.last))
		}
		c.received[seq] = append([]byte(nil), e.Data...)
		c.last = seq
		if contract.Terminal(ev.Kind) {
			c.ended[ev.TurnID] = true
			close(c.changed)
			c.changed = make(chan struct{})
		}
		c.mu.Unlock()
	}
}

// waitEnded waits until turn's terminal event has arrived.
func (c *followedConversation) waitEnded(ctx context.Context, turn string) bool {
	for {
		c.mu.Lock()
		ended, changed := c.ended[turn], c.changed
		c.mu.Unlock()
		if ended {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// send posts a user message and returns the turn it started.
func (c *followedConversation) send(ctx context.Context, base, text string) (string, error) {
	var r contract.SendMessageResponse
	st, err := postJSON(ctx, base+"/api/conversations/"+c.id+"/messages", map[string]string{"text": text}, &r)
	if err != nil {
		return "", err
	}
	if st != http.StatusAccepted {
		return "", &statusError{st}
	}
	return r.TurnID, nil
}

type statusError struct{ status int }

func (e *statusError) Error() string { return "status " + strconv.Itoa(e.status) }

// drive sends messages one turn after another until ctx ends. Before
// killed is set, every send must succeed.
func (c *followedConversation) drive(ctx context.Context, base string, rng *rand.Rand, killed *atomic.Bool) {
	for n := 0; ctx.Err() == nil; n++ {
		turn, err := c.send(ctx, base, killMessage(rng, c.id, n))
		var se *statusError
		switch {
		case errors.As(err, &se) && se.status == http.StatusConflict:
			// A turn is still running (one started before a restart
			// and not yet closed): wait for the next end.
			c.mu.Lock()
			changed := c.changed
			c.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-changed:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		case err != nil:
			if !killed.Load() && ctx.Err() == nil {
				c.fail("send: %v", err)
			}
			return
		}
		c.waitEnded(ctx, turn)
	}
}

// killMessage is a random user message: plain text, slowly streamed text,
// one or two shell commands, or a command that takes a while, so that kills
// land in every phase of a turn.
func killMessage(rng *rand.Rand, conv string, n int) string {
	switch rng.IntN(6) {
	case 0:
		return fmt.Sprintf("plain message %d of %s", n, conv)
	case 1:
		return fmt.Sprintf("slowly now %d [[sleep:%d]] with a few more words to stream one by one", n, 5+rng.IntN(20))
	case 2:
		return fmt.Sprintf(`run it [[tool:Bash {"command":"echo %s-%d; seq 1 %d"}]]`, conv, n, 1+rng.IntN(200))
	case 3:
		return fmt.Sprintf(`two at once [[tool:Bash {"command":"echo first-%d"}]] [[tool:Bash {"command":"echo second-%d"}]]`, n, n)
	case 4:
		return fmt.Sprintf(`take your time [[tool:Bash {"command":"sleep 0.%d; echo slept-%d"}]]`, 1+rng.IntN(4), n)
	default:
		return fmt.Sprintf("message %d: %s", n, strings.Repeat("lorem ipsum ", 1+rng.IntN(40)))
	}
}

func postJSON(ctx context.Context, url string, in, out any) (int, error) {
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return doJSON(req, out)
}

func getJSON(ctx context.Context, url string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	return doJSON(req, out)
}

func doJSON(req *http.Request, out any) (int, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s: %w", data, err)
		}
	}
	return resp.StatusCode, nil
}
