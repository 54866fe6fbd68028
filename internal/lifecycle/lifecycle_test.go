package lifecycle

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Parts stop in reverse order, and a goroutine is waited for before what
// was added before it stops: a loop on a store never meets it closed.
func TestStopsInReverseWaitingForGoroutines(t *testing.T) {
	var (
		g     Group
		mu    sync.Mutex
		order []string
	)
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	g.Defer("store", func(context.Context) error { note("store closed"); return nil })
	g.Go("sweeper", func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a last write, after the cancel
		note("sweeper ended")
		return nil
	})
	g.Defer("listener", func(context.Context) error { note("listener closed"); return nil })
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"listener closed", "sweeper ended", "store closed"}
	if !slices.Equal(order, want) {
		t.Errorf("stop order %q, want %q", order, want)
	}
}

// A goroutine failing while the group runs is its fatal error; the others
// go on until Stop.
func TestFatalStopsTheGroup(t *testing.T) {
	var g Group
	closed := false
	g.Defer("store", func(context.Context) error { closed = true; return nil })
	g.Go("serve", func(ctx context.Context) error { return errors.New("listener gone") })
	g.Go("loop", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	select {
	case err := <-g.Fatal():
		if err.Error() != "serve: listener gone" {
			t.Fatalf("Fatal = %v, want the serve part's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no fatal error")
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !closed {
		t.Error("the store was not closed after the fatal error")
	}
}

// A goroutine that does not end within the shutdown's bound is named, and
// Stop still returns and stops what was added before it.
func TestStopIsBounded(t *testing.T) {
	var g Group
	release := make(chan struct{})
	defer close(release)
	closed := false
	g.Defer("store", func(context.Context) error { closed = true; return nil })
	g.Go("stuck", func(ctx context.Context) error { <-release; return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := g.Stop(ctx)
	if err == nil || !strings.Contains(err.Error(), "stuck: still running") {
		t.Errorf("Stop = %v, want the stuck goroutine named", err)
	}
	if !closed {
		t.Error("the part before the stuck goroutine was not stopped")
	}
}

// A goroutine that ends at its cancel is waited for even when Stop's
// context is over already (a second Ctrl-C cut the grace short).
func TestStopAfterTheGraceStillWaits(t *testing.T) {
	var g Group
	ended := false
	g.Go("loop", func(ctx context.Context) error { <-ctx.Done(); ended = true; return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Stop(ctx); err != nil || !ended {
		t.Errorf("Stop = %v, loop ended %v", err, ended)
	}
}

// Errors of stop steps are returned, each named; a context's own end is
// no fatal error.
func TestStopErrorsNamedAndCancelNotFatal(t *testing.T) {
	var g Group
	g.Go("loop", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	g.Defer("db", func(context.Context) error { return errors.New("close failed") })
	err := g.Stop(context.Background())
	if err == nil || err.Error() != "db: close failed" {
		t.Errorf("Stop = %v", err)
	}
	select {
	case err := <-g.Fatal():
		t.Errorf("a cancelled goroutine was fatal: %v", err)
	default:
	}
}

// What is added after Stop is stopped at once, not leaked.
func TestAddedAfterStop(t *testing.T) {
	var g Group
	g.Stop(context.Background())
	ran := false
	g.Defer("late", func(context.Context) error { ran = true; return nil })
	if !ran {
		t.Error("a step added after Stop did not run")
	}
	g.Go("late loop", func(ctx context.Context) error { t.Error("a goroutine added after Stop ran"); return nil })
}
