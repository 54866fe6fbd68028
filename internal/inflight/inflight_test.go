package inflight

import (
	"runtime"
	"sync"
	"testing"

	"github.com/talkide/platform/internal/poll"
)

// TestIdle: idle at first and again when the last work ends, not before;
// a channel taken while work was in flight closes with that work's end.
func TestIdle(t *testing.T) {
	var c Count
	if !poll.Closed(c.Idle()) {
		t.Fatal("a new count is not idle")
	}
	c.Add(2)
	busy := c.Idle()
	if poll.Closed(busy) {
		t.Fatal("idle with two in flight")
	}
	c.Done()
	if poll.Closed(busy) || poll.Closed(c.Idle()) {
		t.Fatal("idle with one in flight")
	}
	c.Done()
	if !poll.Closed(busy) || !poll.Closed(c.Idle()) {
		t.Fatal("not idle with none in flight")
	}
	c.Add(1)
	if poll.Closed(c.Idle()) || !poll.Closed(busy) {
		t.Fatal("the count rose again: a new wait, and the old one still closed")
	}
	c.Done()
	c.Wait()
}

// TestAddBesideWait: work begins and ends, the count rising from zero
// again and again, while others wait; under -race a WaitGroup used so is
// reported. Every wait ends once the work has.
func TestAddBesideWait(t *testing.T) {
	var c Count
	var work, waiters sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		work.Go(func() {
			for range 500 {
				c.Add(1)
				runtime.Gosched() // a waiter blocks on this work
				c.Done()
			}
		})
		waiters.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					c.Wait()
				}
			}
		})
	}
	work.Wait()
	close(stop)
	waiters.Wait()
	if !poll.Closed(c.Idle()) {
		t.Fatal("not idle after all work ended")
	}
}

func TestNegative(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Done without Add did not panic")
		}
	}()
	var c Count
	c.Done()
}
