package secretfile

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
			var reads, failures atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						v, err := f.Get()
						mu.Lock()
						ok := err == nil && valid[v]
						mu.Unlock()
						reads.Add(1)
						if !ok {
							failures.Add(1)
						}
					}
				}()
			}
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
			close(stop)
			wg.Wait()
			if failures.Load() != 0 || reads.Load() == 0 {
				t.Errorf("%d of %d reads failed", failures.Load(), reads.Load())
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
