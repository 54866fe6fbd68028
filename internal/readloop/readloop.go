// Package readloop checks, in tests, that readers always see a whole state
// while a writer switches it: several goroutines read over and over for as
// long as the writer runs.
package readloop

import (
	"sync"
	"sync/atomic"
)

// Readers is how many goroutines read at once.
const Readers = 4

// Run calls write while Readers goroutines call read in a loop, and
// returns once write has returned and the readers have stopped: how many
// reads there were and how many of them read returned false for.
func Run(read func() bool, write func()) (reads, failed int64) {
	var n, bad atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range Readers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !read() {
					bad.Add(1)
				}
				n.Add(1)
			}
		})
	}
	// Stop the readers even when write ends the test with FailNow, and
	// count only once they have stopped.
	defer func() {
		close(stop)
		wg.Wait()
		reads, failed = n.Load(), bad.Load()
	}()
	write()
	return 0, 0
}
