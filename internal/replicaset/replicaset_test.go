package replicaset

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talkide/platform/internal/fakeclock"
)

func newAt(t *testing.T, dir, holder string, c *fakeclock.Clock) *Registry {
	t.Helper()
	r, err := New(dir, holder, &Options{Interval: time.Second, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func entry(addr string, open int) func() Entry {
	return func() Entry { return Entry{Addr: addr, OpenSessions: open, RunningTurns: 1, MaxRunningTurns: 4} }
}

func holders(es []Entry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.Holder)
	}
	return strings.Join(s, ",")
}

func TestPeersSeeEachOtherAndNotThemselves(t *testing.T) {
	dir, c := t.TempDir(), fakeclock.New(time.Unix(1_000_000, 0))
	a, b := newAt(t, dir, "worker-a", c), newAt(t, dir, "worker-b", c)
	if err := a.Publish(entry("http://10.0.0.1:8080", 3)); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(entry("http://10.0.0.2:8080", 5)); err != nil {
		t.Fatal(err)
	}
	got, err := a.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Holder != "worker-b" || got[0].Addr != "http://10.0.0.2:8080" || got[0].OpenSessions != 5 || got[0].TurnLoad() != 0.25 {
		t.Fatalf("a reads %+v", got)
	}
	peers, gen := a.Peers()
	if holders(peers) != "worker-b" || gen != 1 {
		t.Fatalf("Peers: %+v gen %d", peers, gen)
	}
	// A removed entry is gone at once; a publish after Remove writes nothing.
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	b.Publish(entry("http://10.0.0.2:8080", 5))
	if got, _ := a.Read(); len(got) != 0 {
		t.Fatalf("after b's removal a reads %+v", got)
	}
}

// An entry not rewritten for StaleAfter intervals is ignored; one not
// rewritten for RemoveAfter is deleted.
func TestStaleEntriesIgnoredThenRemoved(t *testing.T) {
	dir, c := t.TempDir(), fakeclock.New(time.Unix(1_000_000, 0))
	a, b := newAt(t, dir, "a", c), newAt(t, dir, "b", c)
	if err := b.Publish(entry("http://127.0.0.1:1", 0)); err != nil {
		t.Fatal(err)
	}
	c.Advance(StaleAfter * time.Second)
	if got, _ := a.Read(); holders(got) != "b" {
		t.Fatalf("an entry %d intervals old: %+v, want it read", StaleAfter, got)
	}
	c.Advance(time.Second)
	if got, _ := a.Read(); len(got) != 0 {
		t.Fatalf("a stale entry was read: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.json")); err != nil {
		t.Fatalf("a stale entry was removed before its time: %v", err)
	}
	c.Advance(RemoveAfter * time.Second)
	a.Read()
	if _, err := os.Stat(filepath.Join(dir, "b.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a very old entry was kept: %v", err)
	}
	// One from a clock far ahead is not trusted either.
	c2 := fakeclock.New(c.Now().Add(time.Hour))
	if err := newAt(t, dir, "ahead", c2).Publish(entry("http://127.0.0.1:1", 0)); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Read(); len(got) != 0 {
		t.Fatalf("an entry dated an hour ahead was read: %+v", got)
	}
}

// Holder names become file names: one that could leave the directory,
// hide, or be empty is refused; a file whose entry names another holder,
// or a bad address, or is not JSON, is skipped.
func TestBadNamesAndEntriesRefused(t *testing.T) {
	dir, c := t.TempDir(), fakeclock.New(time.Unix(1_000_000, 0))
	for _, h := range []string{"", "../x", "..", ".", ".hidden", "a/b", `a\b`, "-a", "a b", "a\x00", strings.Repeat("a", MaxHolderLen+1)} {
		if _, err := New(dir, h, nil); !errors.Is(err, ErrInvalidHolder) {
			t.Errorf("New(%q): %v, want ErrInvalidHolder", h, err)
		}
	}
	for _, h := range []string{"worker-a", "talkide-worker-7c9f5d-x2b4q", "host.example.com-1234", "W_1"} {
		if err := ValidateHolder(h); err != nil {
			t.Errorf("ValidateHolder(%q): %v", h, err)
		}
	}
	a := newAt(t, dir, "a", c)
	if err := a.Publish(entry("ftp://x", 0)); err == nil {
		t.Error("published an ftp address")
	}
	now := c.Now().UTC().Format(time.RFC3339Nano)
	for name, content := range map[string]string{
		"mismatch.json":  `{"holder":"other","addr":"http://127.0.0.1:1","updated_at":"` + now + `"}`,
		"badaddr.json":   `{"holder":"badaddr","addr":"http://u:p@127.0.0.1:1/x","updated_at":"` + now + `"}`,
		"noaddr.json":    `{"holder":"noaddr","updated_at":"` + now + `"}`,
		"negative.json":  `{"holder":"negative","addr":"http://127.0.0.1:1","open_sessions":-1,"updated_at":"` + now + `"}`,
		"garbage.json":   `{"holder":`,
		".hidden.json":   `{"holder":".hidden","addr":"http://127.0.0.1:1","updated_at":"` + now + `"}`,
		"huge.json":      `{"holder":"huge","addr":"http://127.0.0.1:1","x":"` + strings.Repeat("x", maxEntryBytes) + `","updated_at":"` + now + `"}`,
		"good.json":      `{"holder":"good","addr":"http://127.0.0.1:1","updated_at":"` + now + `"}`,
		"good.json.tmp1": `{"holder":"good","addr":"http://127.0.0.1:2","updated_at":"` + now + `"}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "adir.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := a.Read()
	if err != nil {
		t.Fatal(err)
	}
	if holders(got) != "good" || got[0].Addr != "http://127.0.0.1:1" {
		t.Fatalf("read %+v, want only good's entry", got)
	}
}

// Run publishes at once and at every beat, and removes the entry when its
// context ends.
func TestRunPublishesAndRemoves(t *testing.T) {
	dir := t.TempDir()
	r, err := New(dir, "runner", &Options{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	published := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		done <- r.Run(ctx, func() Entry {
			if first {
				first = false
				defer close(published)
			}
			return Entry{Addr: "http://127.0.0.1:9"}
		})
	}()
	<-published
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "runner.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the entry outlived Run: %v", err)
	}
}

func FuzzValidateHolder(f *testing.F) {
	for _, s := range []string{"worker-a", "..", "../etc/passwd", "a.b", ".", "", "a/b", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if ValidateHolder(h) != nil {
			return
		}
		name := h + ".json"
		if filepath.Base(name) != name || strings.HasPrefix(name, ".") || filepath.Clean(name) != name {
			t.Fatalf("holder %q makes the file name %q", h, name)
		}
	})
}

// Whatever a file in the registry holds, Read neither fails nor returns an
// entry that is not the file's own with a usable address.
func FuzzReadEntry(f *testing.F) {
	f.Add([]byte(`{"holder":"peer","addr":"http://127.0.0.1:1","updated_at":"2026-12-06T14:00:00Z"}`))
	f.Add([]byte(`{"holder":"../x","addr":"http://127.0.0.1:1"}`))
	f.Add([]byte(`{"holder":"peer","addr":"file:///etc/passwd"}`))
	f.Add([]byte(`{"holder":"peer","open_sessions":-5}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		c := fakeclock.New(time.Date(2026, 12, 6, 14, 0, 1, 0, time.UTC))
		if err := os.WriteFile(filepath.Join(dir, "peer.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := newAt(t, dir, "self", c).Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			if e.Holder != "peer" || ValidateAddr(e.Addr) != nil || e.OpenSessions < 0 || e.RunningTurns < 0 {
				t.Fatalf("read %+v from %q", e, data)
			}
		}
	})
}

// Each entry carries its beat window; a peer reads when the beats of a
// holder end, and an entry without a window (an older replica), a missing
// one or a name that is no replica's gives none. OnBeat hears of every
// entry written, and of none after Remove.
func TestBeatEnds(t *testing.T) {
	dir, c := t.TempDir(), fakeclock.New(time.Unix(1_000_000, 0))
	type beat struct {
		stamp, done time.Time
		window      time.Duration
	}
	var beats []beat
	a, err := New(dir, "worker-a", &Options{Interval: 3 * time.Second, Now: c.Now, OnBeat: func(stamp, done time.Time, window time.Duration) {
		beats = append(beats, beat{stamp, done, window})
	}})
	if err != nil {
		t.Fatal(err)
	}
	b := newAt(t, dir, "worker-b", c)
	if a.BeatWindow() != 15*time.Second || b.BeatWindow() != MinBeatWindow {
		t.Fatalf("beat windows %s and %s, want 5 intervals and at least %s", a.BeatWindow(), b.BeatWindow(), MinBeatWindow)
	}
	if got := b.BeatEnds("worker-a"); !got.IsZero() {
		t.Fatalf("beats of a replica with no entry end at %s", got)
	}
	t0 := c.Now()
	if err := a.Publish(entry("http://10.0.0.1:8080", 1)); err != nil {
		t.Fatal(err)
	}
	if got := b.BeatEnds("worker-a"); !got.Equal(t0.Add(15 * time.Second)) {
		t.Fatalf("a's beats end at %s, want %s", got, t0.Add(15*time.Second))
	}
	if len(beats) != 1 || !beats[0].stamp.Equal(t0) || beats[0].done.Before(t0) || beats[0].window != 15*time.Second {
		t.Fatalf("OnBeat heard %+v", beats)
	}
	c.Advance(time.Second)
	a.Publish(entry("http://10.0.0.1:8080", 1))
	if got := b.BeatEnds("worker-a"); !got.Equal(t0.Add(16 * time.Second)) {
		t.Fatalf("after the second beat a's beats end at %s", got)
	}
	for _, holder := range []string{"worker-b", "retention:worker-a", "../worker-a", ""} {
		if got := a.BeatEnds(holder); !got.IsZero() {
			t.Errorf("beats of %q end at %s", holder, got)
		}
	}
	os.WriteFile(filepath.Join(dir, "worker-old.json"), []byte(`{"holder":"worker-old","addr":"http://10.0.0.3:8080","updated_at":"2026-12-06T14:15:33Z"}`), 0o600)
	os.WriteFile(filepath.Join(dir, "worker-far.json"), []byte(`{"holder":"worker-far","addr":"http://10.0.0.4:8080","updated_at":"2026-12-06T14:15:33Z","beat_window_ms":86400000}`), 0o600)
	for _, holder := range []string{"worker-old", "worker-far"} {
		if got := a.BeatEnds(holder); !got.IsZero() {
			t.Errorf("beats of %s end at %s, want none", holder, got)
		}
	}
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	a.Publish(entry("http://10.0.0.1:8080", 1))
	if got := b.BeatEnds("worker-a"); !got.IsZero() || len(beats) != 2 {
		t.Fatalf("after Remove: beats end at %s, %d beats heard", got, len(beats))
	}
}
