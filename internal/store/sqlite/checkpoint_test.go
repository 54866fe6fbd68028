package sqlite

import (
	"bytes"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talkide/platform/internal/store"
)

// nextPass waits for a pass of c's goroutine that started after the call and
// returns what it did.
func (c *checkpointer) nextPass(t *testing.T) checkpointResult {
	t.Helper()
	for range 2 { // the first pass to end may have begun before the call
		c.mu.Lock()
		passed := c.passed
		c.mu.Unlock()
		select {
		case <-passed:
		case <-c.done:
			t.Fatal("the checkpointer stopped")
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// putUsers writes n users, one transaction each, the first with ID prefix0.
func putUsers(t *testing.T, s *Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		if err := s.PutUser(t.Context(), store.User{ID: fmt.Sprint(prefix, i), Name: strings.Repeat("n", 100)}); err != nil {
			t.Fatal(err)
		}
	}
}

// countUsers counts the users, through a connection of its own.
func countUsers(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM users`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCommitsDoNotCheckpoint: with the checkpointer stopped, 1,500 commits
// (past SQLite's default autocheckpoint threshold of 1,000 pages) all stay
// in the WAL: no commit copied pages back, so none paid for it.
func TestCommitsDoNotCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "talkide.db")
	s := open(t, path)
	s.ckpt.stop()
	const n = 1500
	putUsers(t, s, "u", n)

	var busy, log, checkpointed int
	if err := s.ckpt.db.QueryRowContext(t.Context(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &checkpointed); err != nil {
		t.Fatal(err)
	}
	if log < n {
		t.Errorf("WAL holds %d frames after %d commits; a commit checkpointed and restarted it", log, n)
	}
	if checkpointed != log {
		t.Errorf("PASSIVE checkpoint without readers: %d of %d frames checkpointed", checkpointed, log)
	}
}

// TestCheckpointInBackground: after many writes the checkpointer's next
// pass leaves nothing in the WAL that is not in the database file.
func TestCheckpointInBackground(t *testing.T) {
	path := filepath.Join(t.TempDir(), "talkide.db")
	s := open(t, path)
	putUsers(t, s, "u", 500)

	r := s.ckpt.nextPass(t)
	if r.err != nil || r.busy || r.mode != "PASSIVE" {
		t.Fatalf("pass after the writes: %+v, want a PASSIVE checkpoint that finished", r)
	}
	if r.log == 0 || r.checkpointed != r.log {
		t.Errorf("pass after the writes: %d of %d WAL frames checkpointed, want all of them (and some)", r.checkpointed, r.log)
	}
	if got := countUsers(t, path); got != 500 {
		t.Errorf("%d users, want 500", got)
	}
}

// TestCheckpointRestartsLargeWAL drives the checkpointer's passes by hand:
// a WAL over the limit is restarted, unless a reader's old snapshot blocks
// that, and then the next attempt waits for the backoff.
func TestCheckpointRestartsLargeWAL(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "talkide.db")
	var logs bytes.Buffer
	s, err := Open(ctx, path, &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.ckpt
	c.stop()
	c.limit = 16 * c.frameSize
	// A blocked forced checkpoint waits this long for the reader, not a second.
	if _, err := c.db.ExecContext(ctx, `PRAGMA busy_timeout = 10`); err != nil {
		t.Fatal(err)
	}

	putUsers(t, s, "a", 100)
	// A read transaction on the snapshot of now: the checkpoints that
	// follow cannot copy what is written after it.
	reader, err := s.reader.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback()
	var n int
	if err := reader.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	putUsers(t, s, "b", 100)

	now := time.Now()
	r := c.pass(ctx, now)
	if r.err != nil || r.mode != "RESTART" || !r.busy || r.checkpointed >= r.log {
		t.Fatalf("pass with a reader on an old snapshot: %+v, want a RESTART checkpoint, blocked", r)
	}
	if !strings.Contains(logs.String(), "blocked") {
		t.Errorf("a blocked forced checkpoint was not logged:\n%s", logs.String())
	}
	if r := c.pass(ctx, now); r.mode != "PASSIVE" {
		t.Errorf("pass right after a blocked forced checkpoint: %+v, want only PASSIVE checkpoints", r)
	}

	if err := reader.Rollback(); err != nil {
		t.Fatal(err)
	}
	r = c.pass(ctx, now.Add(maxForcedBackoff))
	if r.err != nil || r.busy || r.checkpointed != r.log {
		t.Fatalf("pass after the reader finished: %+v, want a checkpoint of everything", r)
	}
	before := r.log
	// The next write starts the WAL over.
	putUsers(t, s, "c", 1)
	if r := c.pass(ctx, now.Add(maxForcedBackoff)); r.err != nil || r.log >= before {
		t.Errorf("pass after the next write: %+v, want a WAL restarted (fewer than %d frames)", r, before)
	}
	if got := countUsers(t, path); got != 201 {
		t.Errorf("%d users, want 201", got)
	}
}

// TestCloseStopsCheckpointer: Close returns after the checkpointer's
// goroutine, and leaves an empty WAL although another connection keeps the
// database open.
func TestCloseStopsCheckpointer(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "talkide.db")
	s, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	putUsers(t, s, "u", 100)

	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var n int
	if err := other.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil {
		t.Fatal(err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.ckpt.done:
	default:
		t.Error("Close returned before the checkpointer's goroutine")
	}
	// The file is still there (the other connection's), emptied.
	if fi, err := os.Stat(path + "-wal"); err != nil {
		t.Errorf("WAL after Close: %v", err)
	} else if fi.Size() != 0 {
		t.Errorf("WAL of %d bytes after Close, want 0", fi.Size())
	}
	if err := other.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil || n != 100 {
		t.Errorf("users seen by the other connection: %d, %v; want 100", n, err)
	}
}

// TestMemoryHasNoCheckpointer: an in-memory database has no WAL.
func TestMemoryHasNoCheckpointer(t *testing.T) {
	if s := open(t, ":memory:"); s.ckpt != nil {
		t.Error("an in-memory store has a checkpointer")
	}
}

// TestConcurrentWithCheckpoints runs writers and readers against a store
// whose checkpointer runs every millisecond (and go test -race watches).
func TestConcurrentWithCheckpoints(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "talkide.db")
	s := open(t, path)
	// A checkpointer that runs far more often than the real one.
	s.ckpt.stop()
	if err := s.ckpt.close(); err != nil {
		t.Fatal(err)
	}
	c, err := newCheckpointer(ctx, path, s.log)
	if err != nil {
		t.Fatal(err)
	}
	c.start(time.Millisecond)
	s.ckpt = c

	if err := s.PutEnv(ctx, store.Env{Tenant: "acme", Name: "prod", WorkerURL: "http://w"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutUser(ctx, store.User{ID: "ada", Name: "Ada"}); err != nil {
		t.Fatal(err)
	}
	const writers, readers, each = 4, 4, 200
	conv := func(w, i int) store.Conversation {
		return store.Conversation{ID: fmt.Sprintf("c%d-%d", w, i), Tenant: "acme", Env: "prod", UserID: "ada", Title: strings.Repeat("t", 200)}
	}

	var wg sync.WaitGroup
	written := make(chan store.Conversation, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, _, err := s.CreateConversation(ctx, conv(w, i)); err != nil {
					t.Error(err)
					return
				}
				written <- conv(w, i)
			}
		})
	}
	var rg sync.WaitGroup
	for range readers {
		rg.Go(func() {
			for want := range written {
				got, err := s.GetConversation(ctx, want.ID)
				if err != nil {
					t.Errorf("GetConversation after CreateConversation: %v", err)
					return
				}
				if got.ID != want.ID || got.Title != want.Title {
					t.Errorf("GetConversation(%s) = %+v", want.ID, got)
				}
			}
		})
	}
	wg.Wait()
	close(written)
	rg.Wait()

	cs, err := s.ListConversations(ctx, "ada")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != writers*each {
		t.Errorf("%d conversations, want %d", len(cs), writers*each)
	}
	if r := c.nextPass(t); r.err != nil || r.checkpointed != r.log {
		t.Errorf("pass after the writes: %+v, want everything checkpointed", r)
	}
}

// BenchmarkCommitLatency reports the distribution of single-row commits at
// 2,000 a second, beside two readers, with SQLite's automatic checkpoint
// (every 1,000 pages, inside a commit; the checkpointer stopped) and with
// the background checkpointer. Its ns/op is the pacing; read the p99.9 and
// max metrics, where the automatic checkpoint shows. -benchtime=8000x runs
// four seconds of it.
func BenchmarkCommitLatency(b *testing.B) {
	for _, mode := range []string{"autocheckpoint", "background"} {
		b.Run(mode, func(b *testing.B) {
			ctx := b.Context()
			s, err := Open(ctx, filepath.Join(b.TempDir(), "talkide.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if mode == "autocheckpoint" {
				s.ckpt.stop()
				if _, err := s.writer.ExecContext(ctx, `PRAGMA wal_autocheckpoint = 1000`); err != nil {
					b.Fatal(err)
				}
			}
			insert, err := s.writeStmt(ctx, `INSERT INTO users (id, name, created_at) VALUES (?, ?, 0)`)
			if err != nil {
				b.Fatal(err)
			}
			get, err := s.readStmt(ctx, `SELECT name FROM users WHERE id = ?`)
			if err != nil {
				b.Fatal(err)
			}

			stop := make(chan struct{})
			var readers sync.WaitGroup
			defer readers.Wait()
			defer close(stop)
			for range 2 {
				readers.Go(func() {
					t := time.NewTicker(time.Millisecond)
					defer t.Stop()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						case <-t.C:
						}
						var name string
						get.QueryRowContext(ctx, fmt.Sprint("u", i%1000)).Scan(&name)
					}
				})
			}

			name := strings.Repeat("n", 100)
			ds := make([]time.Duration, 0, b.N)
			next := time.Now()
			i := 0
			for b.Loop() {
				next = next.Add(500 * time.Microsecond)
				time.Sleep(time.Until(next))
				t0 := time.Now()
				if _, err := insert.ExecContext(ctx, fmt.Sprint("u", i), name); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
				i++
			}
			slices.Sort(ds)
			q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) }
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(q(0.999), "p99.9-µs")
			b.ReportMetric(q(1), "max-µs")
		})
	}
}
