package worker

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// A worker driven well past its bound on running turns: every message
// either starts a turn that finishes with its whole log, or is refused up
// front with worker_busy and Retry-After, recording nothing; once turns
// end, a refused message sent again runs.
func TestOverloadRefusesBeforeTheTurn(t *testing.T) {
	const bound, convs = 4, 24
	tw := newTestWorker(t, workerOpts{maxTurns: bound})
	for i := range convs {
		tw.create(t, fmt.Sprintf("c_%02d", i))
	}
	type answer struct {
		status     int
		code       string
		retryAfter string
		seqBefore  int64
	}
	answers := make([]answer, convs)
	var wg sync.WaitGroup
	for i := range convs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv := fmt.Sprintf("c_%02d", i)
			resp, b := tw.call(t, http.MethodPost, "/v1/sessions/"+conv+"/messages", contract.SendMessageRequest{ClientMessageID: "m1", Text: "hello"})
			a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
			if resp.StatusCode >= 300 {
				a.code = decode[contract.Error](t, b).Error.Code
			}
			answers[i] = a
		}()
	}
	wg.Wait()
	var started, refused []int
	for i, a := range answers {
		switch {
		case a.status == http.StatusAccepted:
			started = append(started, i)
		case a.status == http.StatusServiceUnavailable && a.code == contract.CodeWorkerBusy && a.retryAfter != "":
			refused = append(refused, i)
		default:
			t.Errorf("c_%02d: %d %q (Retry-After %q)", i, a.status, a.code, a.retryAfter)
		}
	}
	if len(started) != bound || len(refused) != convs-bound {
		t.Fatalf("%d started, %d refused; want %d and %d", len(started), len(refused), bound, convs-bound)
	}
	// What the replica exports for its operator and an autoscaler says the
	// same: each refusal counted once, the bound's turns running.
	load := tw.w.Load()
	want := LoadStats{RunningTurns: bound, MaxRunningTurns: bound, OpenSessions: convs,
		Commands: load.Commands, RefusedBusy: convs - bound}
	if load != want || load.Commands < 2*convs {
		t.Errorf("load %+v; want %+v with at least %d commands", load, want, 2*convs)
	}
	// A refused message left nothing behind: its session is as created.
	for _, i := range refused {
		if st := tw.state(t, fmt.Sprintf("c_%02d", i)); st.Turns != 0 || st.Status != contract.StatusIdle {
			t.Errorf("refused c_%02d recorded a turn: %+v", i, st)
		}
	}
	// The started turns run to their end, and a refused message sent again
	// starts once a slot is free.
	for range started {
		tw.h.next(t).finish("end_turn")
	}
	for _, i := range started {
		conv := fmt.Sprintf("c_%02d", i)
		s := tw.openStream(t, conv, "", "")
		got := s.mustUntil(t, func(e contract.Event) bool { return e.Kind == contract.KindTurnFinished })
		s.close()
		if got[0].Ev.Kind != contract.KindSessionCreated {
			t.Errorf("%s's log starts with %s", conv, got[0].Ev.Kind)
		}
	}
	again := fmt.Sprintf("c_%02d", refused[0])
	_, turn := tw.startTurn(t, again, "m1", "hello") // the refused message, sent again
	turn.finish("end_turn")
}

// A replica asked about a conversation another replica holds answers
// session_elsewhere, and counts it: the figure that tells an operator how
// often commands miss their holder.
func TestElsewhereCounted(t *testing.T) {
	a := newTestWorker(t, workerOpts{})
	a.create(t, "c_held")
	b := newTestWorker(t, workerOpts{dir: a.dir, holder: "other-replica"})
	for range 3 {
		resp, body := b.call(t, http.MethodGet, "/v1/sessions/c_held", nil)
		if resp.StatusCode != http.StatusServiceUnavailable || decode[contract.Error](t, body).Error.Code != contract.CodeSessionElsewhere {
			t.Fatalf("the other replica answered %d %s", resp.StatusCode, body)
		}
	}
	if got := b.w.Load(); got.Elsewhere != 3 || got.Commands != 3 || got.OpenSessions != 0 {
		t.Errorf("the other replica's load: %+v", got)
	}
	if got := a.w.Load(); got.Elsewhere != 0 || got.OpenSessions != 1 {
		t.Errorf("the holder's load: %+v", got)
	}
}

// filesUnder counts this process's descriptors open on files below dir.
func filesUnder(t *testing.T, dir string) int { return len(openUnder(t, dir)) }

// openUnder lists the files below dir this process holds open.
func openUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	var open []string
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, dir+"/") {
			open = append(open, strings.TrimPrefix(target, dir+"/"))
		}
	}
	return open
}

// Between turns a session holds no open file (thousands of conversations
// used within minutes would otherwise hold three descriptors each), and
// its next turn writes on as before.
func TestIdleSessionHoldsNoFile(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	projects := filepath.Join(tw.dir, "projects")
	tw.create(t, "c_idle")
	for turn := range 2 {
		tw.sendMessage(t, "c_idle", fmt.Sprintf("m%d", turn), "hello")
		tw.h.next(t).finish("end_turn")
		s := tw.openStream(t, "c_idle", "", "")
		s.mustUntil(t, func(e contract.Event) bool {
			return e.Kind == contract.KindTurnFinished && e.Seq > 0 && turn == 0 || e.Kind == contract.KindTurnFinished && turn == 1
		})
		s.close()
		deadline := time.Now().Add(waitFor)
		for filesUnder(t, projects) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("after turn %d the idle session still holds %d files: %v", turn, filesUnder(t, projects), openUnder(t, projects))
			}
			tw.w.maintainOnce(context.Background())
			time.Sleep(10 * time.Millisecond)
		}
	}
	if st := tw.state(t, "c_idle"); st.Turns != 2 || st.Status != contract.StatusIdle {
		t.Errorf("after two turns with rests between: %+v", st)
	}
}

// A session claimed for closing (idle, or released to spread the load)
// takes no turn: a message that finds it still among the open sessions
// waits for its close and opens the conversation anew, and the turn is
// recorded whole. Checking idle and closing in two steps let a turn start
// on a session whose files were being closed.
func TestSendWhileTheSessionCloses(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	tw.create(t, "c_claim")
	tw.w.mu.Lock()
	s := tw.w.sessions["c_claim"]
	tw.w.mu.Unlock()
	// Idle once its creation is synced.
	for deadline := time.Now().Add(waitFor); !s.claimIdle(time.Now().Add(time.Hour)); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a new session with nothing running never became idle")
		}
	}
	if s.claimIdle(time.Now().Add(time.Hour)) {
		t.Fatal("a session was claimed twice")
	}
	closed := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // a closer slower than the send's lookup
		tw.w.drop(s)
		closed <- s.close(context.Background())
	}()
	if status, _ := tw.sendMessage(t, "c_claim", "m1", "hello"); status != http.StatusAccepted {
		t.Fatalf("send: %d", status)
	}
	if err := <-closed; err != nil {
		t.Fatalf("closing the claimed session: %v", err)
	}
	tw.h.next(t).finish("end_turn")
	st := tw.openStream(t, "c_claim", "", "")
	defer st.close()
	st.mustUntil(t, func(e contract.Event) bool { return e.Kind == contract.KindTurnFinished })
	tw.w.mu.Lock()
	reopened := tw.w.sessions["c_claim"]
	tw.w.mu.Unlock()
	if reopened == s || reopened == nil {
		t.Errorf("the turn ran on the claimed session (%p, claimed %p)", reopened, s)
	}
}

// A report appended after a session's last event (the turn-ended report
// is) is made durable by the session itself, so that the session rests
// with no file open: the reporter syncs only what it sends, and a worker
// may have none yet.
func TestReportAfterTheLastEventRests(t *testing.T) {
	tw := newTestWorker(t, workerOpts{})
	projects := filepath.Join(tw.dir, "projects")
	tw.create(t, "c_report")
	tw.w.mu.Lock()
	s := tw.w.sessions["c_report"]
	tw.w.mu.Unlock()
	rests := func(what string) {
		t.Helper()
		deadline := time.Now().Add(waitFor)
		for filesUnder(t, projects) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s the session still holds %v", what, openUnder(t, projects))
			}
			tw.w.maintainOnce(context.Background())
			time.Sleep(10 * time.Millisecond)
		}
	}
	rests("created,")
	s.mu.Lock()
	s.report(contract.Report{Kind: contract.ReportTurnEnded, IdempotencyKey: "c_report/t_1/turn-ended",
		ConversationID: "c_report", TurnID: "t_1", Time: time.Now().UTC(), Reply: &contract.TurnReply{}})
	s.mu.Unlock()
	rests("with a report appended after its last event,")
}
