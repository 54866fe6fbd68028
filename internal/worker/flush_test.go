package worker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/syncbuf"
)

var errDisk = errors.New("test disk failure")

// faultyDisk is the session store's fsync, failing while failing is set.
type faultyDisk struct {
	failing  atomic.Bool
	failures atomic.Int64 // fsyncs that failed
}

func (d *faultyDisk) fsync(f *os.File) error {
	if d.failing.Load() {
		d.failures.Add(1)
		return errDisk
	}
	return f.Sync()
}

// waitDurable waits until s has published everything it appended.
func waitDurable(t *testing.T, s *session) {
	t.Helper()
	poll.Until(t, "the session's events are durable and published", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending) == 0 && s.store.DurableSeq() == s.store.LastSeq()
	})
}

// flusherGone reports whether s's flusher goroutine has exited.
func flusherGone(s *session) bool {
	return poll.Closed(s.flushed)
}

// While fsync fails, a turn's events are in the log but reach no stream;
// the flusher retries, and once the disk recovers they are streamed in
// order, without a gap, and Shutdown leaves no flusher behind.
func TestEventsWaitForTheDiskToRecover(t *testing.T) {
	disk := &faultyDisk{}
	tw := newTestWorker(t, workerOpts{fsync: disk.fsync, syncRetry: backoff.Policy{Base: time.Millisecond, Max: 4 * time.Millisecond}})
	tw.create(t, "conv-1")
	s := tw.session(t, "conv-1")
	waitDurable(t, s)
	durable := s.store.DurableSeq()
	stream := tw.openStream(t, "conv-1", "", "")
	stream.mustUntil(t, seqIs(durable))
	sub := s.subscribe()
	defer s.unsubscribe(sub)

	disk.failing.Store(true)
	_, sent := tw.sendMessage(t, "conv-1", "m-1", "hello")
	ft := tw.h.next(t)
	ft.Emit(contract.Event{Kind: contract.KindTextDelta, Text: "one"})
	ft.Emit(contract.Event{Kind: contract.KindTextDelta, Text: "two"})
	poll.Until(t, "the flusher has retried the failed sync", func() bool { return disk.failures.Load() >= 3 })
	if n := len(sub.ch); n != 0 {
		t.Errorf("%d events published while every fsync failed", n)
	}
	if got := s.store.DurableSeq(); got != durable {
		t.Errorf("DurableSeq = %d while every fsync failed, want %d", got, durable)
	}
	if got, want := s.store.LastSeq(), durable+4; got != want {
		t.Errorf("LastSeq = %d, want %d: the events are appended while they wait", got, want)
	}

	disk.failing.Store(false)
	ft.finish("end_turn")
	type ev struct {
		Seq        int64
		Kind, Text string
	}
	want := []ev{
		{durable + 1, contract.KindUserMessage, "hello"},
		{durable + 2, contract.KindTurnStarted, ""},
		{durable + 3, contract.KindTextDelta, "one"},
		{durable + 4, contract.KindTextDelta, "two"},
		{durable + 5, contract.KindTurnFinished, ""},
	}
	var published []ev
	for len(published) < len(want) {
		select {
		case e, ok := <-sub.ch:
			if !ok {
				t.Fatalf("subscriber closed after %v", published)
			}
			published = append(published, ev{e.Seq, e.Kind, e.Text})
		case <-time.After(waitFor):
			t.Fatalf("published after the disk recovered: %v, want %d events", published, len(want))
		}
	}
	if diff := cmp.Diff(want, published); diff != "" {
		t.Errorf("published after the disk recovered (-want +got):\n%s", diff)
	}
	got := stream.mustUntil(t, terminal(sent.TurnID))
	checkSequence(t, got, durable+1)
	if len(got) != len(want) {
		t.Errorf("the stream got %v, want %d events", kindsOf(got), len(want))
	}

	if err := tw.w.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if !flusherGone(s) {
		t.Error("the session's flusher is still running after Shutdown")
	}
}

// A session closed while its fsync fails returns the failure from close,
// logs it, and returns at once: the final sync is tried once, not waited
// for through the backoff, and the flusher is gone when close returns.
// Shutdown reports the same failure.
func TestCloseWithAFailingLastSync(t *testing.T) {
	disk := &faultyDisk{}
	var logs syncbuf.Buffer
	tw := newTestWorker(t, workerOpts{
		fsync: disk.fsync,
		// Far longer than the test: a close that waited for a retry
		// would time out.
		syncRetry: backoff.Policy{Base: time.Hour, Max: time.Hour},
		logger:    slog.New(slog.NewTextHandler(&logs, nil)),
	})
	tw.create(t, "conv-1")
	tw.create(t, "conv-2")
	s1, s2 := tw.session(t, "conv-1"), tw.session(t, "conv-2")
	waitDurable(t, s1)
	waitDurable(t, s2)

	disk.failing.Store(true)
	s1.emit(contract.Event{Kind: contract.KindNotice, Text: "not durable"})
	poll.Until(t, "the flusher has tried to sync", func() bool { return disk.failures.Load() == 1 })
	tw.w.drop(s1)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err := s1.close(ctx)
	if !errors.Is(err, errDisk) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close with a failing last sync = %v, want %v at once", err, errDisk)
	}
	if !flusherGone(s1) {
		t.Error("close returned before its flusher exited")
	}
	if n := disk.failures.Load(); n != 2 {
		t.Errorf("%d failed fsyncs, want 2: the flusher's and the one of the store's Close", n)
	}
	if err := s1.close(ctx); !errors.Is(err, errDisk) {
		t.Errorf("second close = %v, want %v again", err, errDisk)
	}
	if l := logs.String(); !strings.Contains(l, "session closed without its last sync") || !strings.Contains(l, errDisk.Error()) || !strings.Contains(l, "conversation=conv-1") {
		t.Errorf("the failed last sync is not logged with its cause and conversation:\n%s", l)
	}

	s2.emit(contract.Event{Kind: contract.KindNotice, Text: "not durable either"})
	if err := tw.w.Shutdown(ctx); !errors.Is(err, errDisk) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a failing last sync = %v, want %v at once", err, errDisk)
	}
	if !flusherGone(s2) {
		t.Error("Shutdown returned before a session's flusher exited")
	}
}
