// Package poll waits in tests for what no event signals: a goroutine's
// work after a connection closed, a file written in the background.
package poll

import (
	"testing"
	"time"
)

// Within is how long Until waits: a bound on a test that would hang, not
// a timing requirement, so long enough for a machine loaded with a whole
// stack of replicas.
const Within = time.Minute

// Until waits, up to Within, until cond holds, trying it every few
// milliseconds; then it fails the test, saying what it waited for.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", Within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Closed reports whether ch is closed now, without waiting.
func Closed[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
