package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Shutdown's Flush must not find "nothing to do" while Run is delivering an
// outbox it has already taken out of dirty: it waits for that delivery, so
// that the reports are acknowledged before the sessions close.
func TestFlushWaitsForTheFlushInProgress(t *testing.T) {
	cp := newControlPlane(t, 0, true) // the first batch is held
	release := sync.OnceFunc(func() { close(cp.hold) })
	t.Cleanup(release) // before the server closes, also when the test fails
	ob := outbox(t)
	addReports(t, ob, "a")
	rp := newTestReporter(cp)
	rp.Notify(ob)
	first := make(chan error, 1)
	go func() { first <- rp.Flush(context.Background()) }() // as Run does
	<-cp.holding

	// While the first delivery is held, a second Flush waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := rp.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush during another delivery = %v, want it to wait (until its context ends)", err)
	}
	second := make(chan error, 1)
	go func() { second <- rp.Flush(context.Background()) }()
	release()
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if p, err := ob.PendingReports(); err != nil || len(p) != 0 {
		t.Fatalf("after the second Flush returned: %d reports pending, %v", len(p), err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
