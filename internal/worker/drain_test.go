package worker

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/talkide/platform/internal/contract"
)

// A draining replica hands its idle conversations over at once, and a
// running one after its own turn, not after the replica's longest: another
// replica on the same volume serves the idle conversation while the drain
// still waits for the running turns, the conversation whose turn ended
// while another turn still runs, and the last one once its turn has ended.
func TestDrainHandsIdleOverAtOnce(t *testing.T) {
	a := newTestWorker(t, workerOpts{})
	a.create(t, "c_idle")
	a.create(t, "c_busy")
	_, turn := a.startTurn(t, "c_busy", "m1", "hello")
	a.create(t, "c_long")
	_, long := a.startTurn(t, "c_long", "m2", "a long one")
	b := newTestWorker(t, workerOpts{dir: a.dir, holder: "other-replica"})
	stateAt := func(tw *testWorker, id string) (int, string) {
		resp, body := tw.call(t, http.MethodGet, "/v1/sessions/"+id, nil)
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, decode[contract.Error](t, body).Error.Code
		}
		return resp.StatusCode, ""
	}
	if st, code := stateAt(b, "c_idle"); code != contract.CodeSessionElsewhere {
		t.Fatalf("before the drain the other replica answered %d %s for the idle conversation", st, code)
	}

	// No deadline on the grace: the test ends the turns itself, and a
	// loaded machine must not end the drain between its steps.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	drained := make(chan error, 1)
	go func() { drained <- a.w.Shutdown(ctx) }()
	// movesWhileRunning waits until b serves moved, while the drain still
	// waits for the conversation running, whose turn the test holds.
	movesWhileRunning := func(moved, what, running string) {
		t.Helper()
		movesDuringDrain(t, b, moved, what, drained)
		if _, code := stateAt(b, running); code != contract.CodeSessionElsewhere {
			t.Fatalf("%s, with a running turn, moved before its turn ended: %q", running, code)
		}
	}
	movesWhileRunning("c_idle", "the idle conversation", "c_busy")
	turn.finish("end_turn")
	movesWhileRunning("c_busy", "the conversation whose turn ended", "c_long")

	long.finish("end_turn")
	if err := <-drained; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, id := range []string{"c_busy", "c_long"} {
		st, body := b.call(t, http.MethodGet, "/v1/sessions/"+id, nil)
		if st.StatusCode != http.StatusOK {
			t.Fatalf("after the drain the other replica answered %d %s for %s", st.StatusCode, body, id)
		}
		if got := decode[contract.SessionState](t, body); got.Status != contract.StatusIdle || got.Turns != 1 {
			t.Errorf("%s after the hand-over: %+v", id, got)
		}
	}
}

// A conversation whose reports a drain could not deliver is handed over
// all the same, at once, while another turn keeps the drain going: its
// next holder delivers them when it opens it.
func TestDrainHandsOverUndeliveredReports(t *testing.T) {
	down := newControlPlane(t, 1<<30, false) // answers every batch 503
	up := newControlPlane(t, 0, false)
	a := newTestWorker(t, workerOpts{reporter: newTestReporter(down)})
	a.create(t, "c_long")
	a.create(t, "c_rep")
	_, long := a.startTurn(t, "c_long", "m1", "a long one")
	sent, rep := a.startTurn(t, "c_rep", "m2", "hello")
	rep.finish("end_turn")
	st := a.openStream(t, "c_rep", "", "")
	st.mustUntil(t, func(e contract.Event) bool { return e.Kind == contract.KindTurnFinished })
	st.close()

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	drained := make(chan error, 1)
	go func() { drained <- a.w.Shutdown(ctx) }()
	rp := newTestReporter(up)
	b := newTestWorker(t, workerOpts{dir: a.dir, holder: "other-replica", reporter: rp})
	movesDuringDrain(t, b, "c_rep", "the conversation with undelivered reports", drained) // b is told of its outbox
	if err := rp.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if key := "c_rep/" + sent.TurnID + "/turn-ended"; up.deliveries(key) != 1 {
		t.Errorf("the turn-ended report %s reached the control-plane through the next holder %d times, want 1 (delivered: %v)", key, up.deliveries(key), up.keys())
	}
	long.finish("end_turn")
	if err := <-drained; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// movesDuringDrain waits until b serves conversation id, which a draining
// replica held (b answers session_elsewhere until then), and fails if the
// drain has ended meanwhile: a turn the test holds keeps it going.
func movesDuringDrain(t *testing.T, b *testWorker, id, what string, drained <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); ; time.Sleep(5 * time.Millisecond) {
		resp, body := b.call(t, http.MethodGet, "/v1/sessions/"+id, nil)
		if resp.StatusCode == http.StatusOK {
			break
		}
		if code := decode[contract.Error](t, body).Error.Code; code != contract.CodeSessionElsewhere || time.Now().After(deadline) {
			t.Fatalf("%s during the drain: %d %s", what, resp.StatusCode, code)
		}
	}
	select {
	case err := <-drained:
		t.Fatalf("the drain ended (%v) while a turn ran", err)
	default:
	}
}
