package secretfile

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// When the kernel's event queue overflows, the events it dropped may
// have been the file's, so the overflow alone must cause a read. The
// watcher is held inside its first event while other files' events fill
// the queue past fs.inotify.max_queued_events; the file's replace then
// finds the queue full and is dropped, and only the overflow can bring it.
func TestQueueOverflowReadsTheFile(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skip("no fs.inotify.max_queued_events:", err)
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || limit <= 0 || limit > 1<<20 {
		t.Skipf("fs.inotify.max_queued_events = %q: too large to fill in a test", b)
	}
	dir, path := plainFile(t, "v1")
	a, z := filepath.Join(dir, "other-a"), filepath.Join(dir, "other-z")
	must(t, os.WriteFile(a, nil, 0o600))
	must(t, os.WriteFile(z, nil, 0o600))

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var names []string
	f, err := Watch(t.Context(), path, &Options{Poll: time.Hour, onEvent: func(name string) {
		once.Do(func() {
			close(held)
			<-release
		})
		mu.Lock()
		names = append(names, name)
		mu.Unlock()
	}})
	must(t, err)

	must(t, os.Chmod(a, 0o640))
	<-held
	// The kernel merges an event identical to the one queued last, so the
	// two files take turns.
	for i := range limit + 16 {
		p := a
		if i%2 == 1 {
			p = z
		}
		must(t, os.Chmod(p, os.FileMode(0o600|(i%2)<<5)))
	}
	replace(t, path, "v2")
	close(release)
	waitFor(t, f, "v2")

	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(names, "secrets") {
		t.Fatal("the queue did not overflow: the replace's own event arrived")
	}
}
