package secretfile

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talkide/platform/internal/poll"
	"github.com/talkide/platform/internal/readloop"
)

// kubeletDir lays out a Secret volume as the kubelet's atomic writer
// does: the files live in a timestamped directory, ..data points at it,
// and each key is a symlink through ..data.
func kubeletDir(t *testing.T, value string) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_12_01_00_00_00.000000001")
	must(t, os.Mkdir(ts, 0o755))
	must(t, os.WriteFile(filepath.Join(ts, "identity-token"), []byte(value+"\n"), 0o400))
	must(t, os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")))
	must(t, os.Symlink("..data/identity-token", filepath.Join(dir, "identity-token")))
	return dir
}

// swap updates the volume as the kubelet does: a new timestamped
// directory, ..data_tmp pointing at it renamed over ..data, then the old
// directory removed.
func swap(t *testing.T, dir, value string, n int) {
	t.Helper()
	old, err := os.Readlink(filepath.Join(dir, "..data"))
	must(t, err)
	ts := filepath.Join(dir, "..2026_12_01_00_00_00."+time.Now().Format("150405.000000000")+string(rune('a'+n%26)))
	must(t, os.Mkdir(ts, 0o755))
	must(t, os.WriteFile(filepath.Join(ts, "identity-token"), []byte(value+"\n"), 0o400))
	must(t, os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	must(t, os.RemoveAll(filepath.Join(dir, old)))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Readers never fail and never see anything but a whole token while the
// volume is swapped again and again; the last value wins.
func TestSwapNeverFailsAReader(t *testing.T) {
	for name, poll := range map[string]time.Duration{"events": time.Hour, "poll only": 20 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			dir := kubeletDir(t, "token-0")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			f, err := Watch(ctx, filepath.Join(dir, "identity-token"), &Options{Poll: poll})
			must(t, err)
			if name == "poll only" {
				// No events: the poll alone must find the change.
				first, _ := f.Get() // under the lock: f's own watch runs too
				f2 := &File{path: f.path, poll: poll, log: f.log, value: first}
				go f2.run(ctx, nil)
				f = f2
			}
			valid := map[string]bool{"token-0": true}
			var mu sync.Mutex
			reads, failures := readloop.Run(func() bool {
				v, err := f.Get()
				mu.Lock()
				defer mu.Unlock()
				return err == nil && valid[v]
			}, func() {
				last := ""
				for i := 1; i <= 50; i++ {
					last = "token-" + string(rune('A'+i%26)) + time.Now().Format("150405.000000000")
					mu.Lock()
					valid[last] = true
					mu.Unlock()
					swap(t, dir, last, i)
				}
				deadline := time.Now().Add(10 * time.Second)
				for {
					if v, _ := f.Get(); v == last {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the last value never arrived: %v", f.value)
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
			if failures != 0 || reads == 0 {
				t.Errorf("%d of %d reads failed", failures, reads)
			}
			if err := f.Healthy(); err != nil {
				t.Errorf("Healthy = %v", err)
			}
		})
	}
}

// A file that goes missing keeps its last contents but is reported
// unhealthy; one that is missing at the start is an error.
func TestMissingFile(t *testing.T) {
	if _, err := Watch(t.Context(), filepath.Join(t.TempDir(), "nope"), nil); err == nil {
		t.Fatal("Watch of a missing file succeeded")
	}
	dir := kubeletDir(t, "token-0")
	f, err := Watch(t.Context(), filepath.Join(dir, "identity-token"), &Options{Poll: time.Hour})
	must(t, err)
	must(t, os.Remove(filepath.Join(dir, "identity-token")))
	if _, err := f.reload(); err == nil {
		t.Fatal("reload of a removed file succeeded")
	}
	if v, err := f.Get(); v != "token-0" || err != nil {
		t.Errorf("Get after removal = %q, %v; want the last contents", v, err)
	}
	if f.Healthy() == nil {
		t.Error("Healthy = nil for a removed file")
	}
}

// waitFor waits until f holds want.
func waitFor(t *testing.T, f *File, want string) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("f to hold %q", want), func() bool {
		v, _ := f.Get()
		return v == want
	})
}

// plainFile writes a regular file named secrets into a new directory.
func plainFile(t *testing.T, value string) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "secrets")
	must(t, os.WriteFile(path, []byte(value), 0o600))
	return dir, path
}

// replace writes value to a temporary file and renames it over path, as
// talkide admin keys rotate does.
func replace(t *testing.T, path, value string) {
	t.Helper()
	tmp := path + ".tmp"
	must(t, os.WriteFile(tmp, []byte(value), 0o600))
	must(t, os.Rename(tmp, path))
}

// The poll in these tests is an hour: only the directory's watch can
// bring the change in time.

func TestAtomicReplaceIsSeen(t *testing.T) {
	_, path := plainFile(t, "v1")
	changes := make(chan string, 4)
	f, err := Watch(t.Context(), path, &Options{Poll: time.Hour, OnChange: func(v string) { changes <- v }})
	must(t, err)
	replace(t, path, "v2\n")
	waitFor(t, f, "v2")
	if v := <-changes; v != "v2" {
		t.Errorf("OnChange got %q, want v2", v)
	}
}

func TestInPlaceRewriteIsSeen(t *testing.T) {
	_, path := plainFile(t, "v1")
	f, err := Watch(t.Context(), path, &Options{Poll: time.Hour})
	must(t, err)
	must(t, os.WriteFile(path, []byte("v2"), 0o600))
	waitFor(t, f, "v2")
}

func TestKubeletSwapIsSeen(t *testing.T) {
	dir := t.TempDir()
	must(t, os.Mkdir(filepath.Join(dir, "..2026_a"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "..2026_a", "secrets"), []byte("v1"), 0o400))
	must(t, os.Symlink("..2026_a", filepath.Join(dir, "..data")))
	must(t, os.Symlink("..data/secrets", filepath.Join(dir, "secrets")))
	f, err := Watch(t.Context(), filepath.Join(dir, "secrets"), &Options{Poll: time.Hour})
	must(t, err)

	must(t, os.Mkdir(filepath.Join(dir, "..2026_b"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "..2026_b", "secrets"), []byte("v2"), 0o400))
	must(t, os.Symlink("..2026_b", filepath.Join(dir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	waitFor(t, f, "v2")
}

// A database beside the file (the control-plane's SQLite and its WAL)
// writes all the time to files it keeps open; none of that may read the
// file again, and on Linux none of it may even reach the watcher.
func TestWritesToAnotherFileCauseNoRead(t *testing.T) {
	dir, path := plainFile(t, "v1")
	// Opened before the watch starts, as the database is.
	db, err := os.OpenFile(filepath.Join(dir, "other.db"), os.O_CREATE|os.O_RDWR, 0o600)
	must(t, err)
	defer db.Close()

	var mu sync.Mutex
	var names []string
	f, err := Watch(t.Context(), path, &Options{Poll: time.Hour, onEvent: func(name string) {
		mu.Lock()
		names = append(names, name)
		mu.Unlock()
	}})
	must(t, err)
	before := f.reloads.Load()

	page := make([]byte, 4096)
	for i := range 1000 {
		page[0] = byte(i)
		if _, err := db.WriteAt(page, int64(i%64)*4096); err != nil {
			t.Fatal(err)
		}
		must(t, db.Sync())
	}
	// The kernel delivers a directory's events in order, so once this
	// replace is seen every event the writes caused has been handled.
	replace(t, path, "v2")
	waitFor(t, f, "v2")

	if n := f.reloads.Load() - before; n != 1 {
		t.Errorf("%d reads of the file after 1000 writes to another one and one replace; want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(names, "secrets") {
		t.Errorf("the watch never saw the replace: events %q", names)
	}
	if runtime.GOOS == "linux" && slices.Contains(names, "other.db") {
		t.Errorf("writes to other.db woke the watcher: events %q", names)
	}
}

// Stopping the watch ends its goroutine, which is parked reading events.
func TestStopEndsTheWatch(t *testing.T) {
	w, err := watchDir(t.TempDir(), func(string) bool { return true }, slog.New(slog.DiscardHandler))
	must(t, err)
	stopped := make(chan struct{})
	go func() {
		w.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return")
	}
	if _, ok := <-w.C; ok {
		t.Error("C still open after stop")
	}
}

// logCount counts the log records whose message contains a string.
type logCount struct {
	slog.Handler
	substr string
	n      *atomic.Int64
}

func (logCount) Enabled(context.Context, slog.Level) bool { return true }

func (h logCount) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.n.Add(1)
	}
	return nil
}

// When the directory itself goes away or moves, the watch says so once
// and the poll alone finds the file when it is back.
func TestLostDirectoryFallsBackToPolling(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("how a lost directory is reported depends on the system's watch")
	}
	for name, lose := range map[string]func(dir string) error{
		"removed": os.RemoveAll,
		"moved":   func(dir string) error { return os.Rename(dir, dir+"-moved") },
	} {
		t.Run(name, func(t *testing.T) {
			dir, path := plainFile(t, "v1")
			var ended atomic.Int64
			log := slog.New(logCount{Handler: slog.DiscardHandler, substr: "watch ended", n: &ended})
			f, err := Watch(t.Context(), path, &Options{Poll: 20 * time.Millisecond, Logger: log})
			must(t, err)
			must(t, lose(dir))
			deadline := time.Now().Add(10 * time.Second)
			for ended.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no warning that the watch ended")
				}
				time.Sleep(2 * time.Millisecond)
			}
			if v, err := f.Get(); v != "v1" || err != nil {
				t.Errorf("Get with the directory gone = %q, %v; want the last contents", v, err)
			}
			must(t, os.Mkdir(dir, 0o700))
			must(t, os.WriteFile(path, []byte("v2"), 0o600))
			waitFor(t, f, "v2")
			if n := ended.Load(); n != 1 {
				t.Errorf("the watch's end was logged %d times, want once", n)
			}
		})
	}
}
