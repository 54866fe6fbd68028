package sessionstore

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/fakeclock"
)

// retentionFixture is a store with three sessions at a fixed clock:
// "busy" leased by worker-a (open), "done" closed (lease released), and
// "stale" whose holder died (lease left to expire).
type retentionFixture struct {
	clock   *fakeclock.Clock
	root    string
	archive string
	admin   *Store   // the retention tool's store
	busy    *Session // still open
}

func newRetentionFixture(t *testing.T) *retentionFixture {
	t.Helper()
	base := t.TempDir()
	f := &retentionFixture{
		clock:   fakeclock.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)),
		root:    filepath.Join(base, "projects"),
		archive: filepath.Join(base, "archive", "projects"),
	}
	worker := newStoreAt(t, f.root, "worker-a", f.clock)
	mk := func(id string, events int) *Session {
		s := mustCreate(t, worker, id, Meta{Harness: "native", CreatedAt: f.clock.Now()})
		for i := 0; i < events; i++ {
			if err := s.AppendEvent(&contract.Event{Kind: contract.KindTextDelta, Text: "x", Time: f.clock.Now().Add(time.Duration(i) * time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	f.busy = mk("busy", 3)
	t.Cleanup(func() { f.busy.Close() })
	if err := mk("done", 5).Close(); err != nil {
		t.Fatal(err)
	}
	mk("stale", 1) // never closed: its lease just expires
	f.admin = newStoreAt(t, f.root, "admin", f.clock)
	return f
}

// snapshot records every path under dir with its mode, size, time and
// content hash.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String() + " " + fi.ModTime().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ids(infos []SessionInfo) []string {
	var out []string
	for _, i := range infos {
		out = append(out, i.ID)
	}
	return out
}

func TestListDescribesSessions(t *testing.T) {
	f := newRetentionFixture(t)
	// A stray directory that is not a conversation id, and one without
	// meta.json.
	os.MkdirAll(filepath.Join(f.root, ".tmp-x"), 0o700)
	os.MkdirAll(filepath.Join(f.root, "empty"), 0o700)

	infos, err := f.admin.List()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"busy", "done", "empty", "stale"}, ids(infos)); diff != "" {
		t.Fatalf("ids (-want +got):\n%s", diff)
	}
	by := map[string]SessionInfo{}
	for _, i := range infos {
		by[i.ID] = i
	}
	now := f.clock.Now()
	busy, done, empty := by["busy"], by["done"], by["empty"]
	if busy.LastSeq != 3 || !busy.LastEvent.Equal(now.Add(2*time.Second)) || busy.Size == 0 || busy.Problem != nil {
		t.Errorf("busy = %+v", busy)
	}
	if !busy.Lease.Live(now) || busy.Lease.Holder != "worker-a" || busy.Lease.Fence == 0 {
		t.Errorf("busy lease = %+v, want live, held by worker-a", busy.Lease)
	}
	if done.LastSeq != 5 || done.Lease.Live(now) || !done.Lease.Released {
		t.Errorf("done = %+v, want 5 events and a released lease", done)
	}
	if !done.CreatedAt.Equal(now) || done.LastActive().Before(done.LastEvent) {
		t.Errorf("done times: created %v, last active %v", done.CreatedAt, done.LastActive())
	}
	if empty.Problem == nil || empty.Lease.Fence != 0 {
		t.Errorf("empty = %+v, want a problem and no lease", empty)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	f := newRetentionFixture(t)
	base := filepath.Dir(f.root)
	before := snapshot(t, base)
	// A live lease is reported in a dry run as it would be for real.
	if _, err := f.admin.Archive("busy", f.archive, &RetentionOptions{DryRun: true}); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("dry-run archive of a leased session: err = %v, want ErrLeaseHeld", err)
	}
	if err := f.admin.Delete("busy", &RetentionOptions{DryRun: true, Force: true}); err != nil {
		t.Errorf("dry-run forced delete: %v", err)
	}
	f.clock.Advance(time.Hour) // every lease has expired
	for _, id := range []string{"busy", "done", "stale"} {
		dest, err := f.admin.Archive(id, f.archive, &RetentionOptions{DryRun: true})
		if err != nil || dest == "" {
			t.Errorf("dry-run archive %s = %q, %v", id, dest, err)
		}
		if err := f.admin.Delete(id, &RetentionOptions{DryRun: true}); err != nil {
			t.Errorf("dry-run delete %s: %v", id, err)
		}
	}
	if _, err := f.admin.List(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, snapshot(t, base)); diff != "" {
		t.Fatalf("a dry run changed the tree (-before +after):\n%s", diff)
	}
}

func TestLeasedSessionRefused(t *testing.T) {
	f := newRetentionFixture(t)
	base := filepath.Dir(f.root)
	before := snapshot(t, base)
	for name, opts := range map[string]*RetentionOptions{"real": nil, "dry run": {DryRun: true}} {
		_, err := f.admin.Archive("busy", f.archive, opts)
		var held *LeaseHolderError
		if !errors.As(err, &held) || !errors.Is(err, ErrLeaseHeld) || held.Holder != "worker-a" {
			t.Errorf("%s archive of a leased session: err = %v, want a LeaseHolderError for worker-a", name, err)
		}
		if err := f.admin.Delete("busy", opts); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("%s delete of a leased session: err = %v, want ErrLeaseHeld", name, err)
		}
	}
	// The stale lease is still within its TTL (plus skew): refused too.
	if err := f.admin.Delete("stale", nil); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("delete within the stale lease's lifetime: err = %v, want ErrLeaseHeld", err)
	}
	if diff := cmp.Diff(before, snapshot(t, base)); diff != "" {
		t.Fatalf("a refused call changed the tree (-before +after):\n%s", diff)
	}
	// The owner carries on undisturbed.
	if err := f.busy.AppendEvent(&contract.Event{Kind: contract.KindTextDelta}); err != nil {
		t.Fatalf("owner after refused archive: %v", err)
	}
}

func TestReleasedAndExpiredLeasesAllowed(t *testing.T) {
	f := newRetentionFixture(t)
	// "done" was closed: its lease is released, no waiting needed.
	dest, err := f.admin.Archive("done", f.archive, nil)
	if err != nil {
		t.Fatalf("archive of a released session: %v", err)
	}
	if want := filepath.Join(f.archive, "done-20250301T120000Z"); dest != want {
		t.Errorf("archive path = %s, want %s", dest, want)
	}
	// "stale" can go once its lease has expired past the clock skew.
	f.clock.Advance(DefaultLeaseTTL + MaxClockSkew)
	if err := f.admin.Delete("stale", nil); err != nil {
		t.Fatalf("delete after the lease expired: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.root, "stale")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale still exists: %v", err)
	}
	entries, _ := os.ReadDir(f.root)
	for _, e := range entries {
		if e.Name() != "busy" {
			t.Errorf("left in the root: %s", e.Name())
		}
	}
}

func TestArchiveThenGoneFromListAndPresentInArchive(t *testing.T) {
	f := newRetentionFixture(t)
	before, err := f.admin.Info("done")
	if err != nil {
		t.Fatal(err)
	}
	dest, err := f.admin.Archive("done", f.archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := f.admin.List()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"busy", "stale"}, ids(infos)); diff != "" {
		t.Errorf("after archive (-want +got):\n%s", diff)
	}
	if _, err := f.admin.Info("done"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Info of the archived session: err = %v, want ErrNotFound", err)
	}
	// The archive is a session directory in the same format: it opens
	// with the same code, history intact, and its lease is released.
	archived, err := New(f.archive, &Options{Holder: "restorer", Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ai, err := archived.Info(filepath.Base(dest))
	if err != nil {
		t.Fatal(err)
	}
	if ai.LastSeq != before.LastSeq || ai.Lease.Live(f.clock.Now()) || ai.Problem != nil {
		t.Errorf("archived session = %+v, want %d events and no live lease", ai, before.LastSeq)
	}
	// Restoring is a rename back; the session opens for writing at once.
	if err := os.Rename(dest, filepath.Join(f.root, "done")); err != nil {
		t.Fatal(err)
	}
	s, err := f.admin.Load("done")
	if err != nil {
		t.Fatalf("load restored session: %v", err)
	}
	defer s.Close()
	if got := collect(t, s, 0); len(got) != 5 {
		t.Errorf("restored session has events %v, want 5", got)
	}
	// Archiving twice within one second would overwrite: refused.
	s.Close()
	if _, err := f.admin.Archive("done", f.archive, nil); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(f.root, "done"), 0o700)
	if _, err := f.admin.Archive("done", f.archive, nil); !errors.Is(err, os.ErrExist) {
		t.Errorf("archive onto an existing destination: err = %v, want ErrExist", err)
	}
}

func TestForceTakesTheLeaseOver(t *testing.T) {
	f := newRetentionFixture(t)
	if _, err := f.admin.Archive("busy", f.archive, &RetentionOptions{Force: true}); err != nil {
		t.Fatalf("forced archive: %v", err)
	}
	// The old owner is fenced off at its next renewal.
	if err := f.busy.RenewLease(); !errors.Is(err, ErrFenced) {
		t.Errorf("owner renewal after a forced archive: err = %v, want ErrFenced", err)
	}
	if err := f.admin.Delete("stale", &RetentionOptions{Force: true}); err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	infos, err := f.admin.List()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"done"}, ids(infos)); diff != "" {
		t.Errorf("after forced archive and delete (-want +got):\n%s", diff)
	}
}

func TestRetentionValidatesIDs(t *testing.T) {
	f := newRetentionFixture(t)
	// Something outside the store that a traversal would reach.
	victim := filepath.Join(filepath.Dir(f.root), "victim")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	// A symbolic link inside the store is not a session directory.
	if err := os.Symlink(victim, filepath.Join(f.root, "link")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", ".", "..", "../victim", "a/b", "/etc", "-x", ".deleted-x", "done/../../victim"} {
		if _, err := f.admin.Info(id); !errors.Is(err, contract.ErrInvalidID) {
			t.Errorf("Info(%q): err = %v, want ErrInvalidID", id, err)
		}
		if _, err := f.admin.Archive(id, f.archive, nil); !errors.Is(err, contract.ErrInvalidID) {
			t.Errorf("Archive(%q): err = %v, want ErrInvalidID", id, err)
		}
		if err := f.admin.Delete(id, nil); !errors.Is(err, contract.ErrInvalidID) {
			t.Errorf("Delete(%q): err = %v, want ErrInvalidID", id, err)
		}
	}
	for _, dest := range []string{f.root, filepath.Join(f.root, "archive"), filepath.Join(f.root, "done")} {
		if _, err := f.admin.Archive("done", dest, nil); err == nil {
			t.Errorf("Archive into %s (inside the store) succeeded", dest)
		}
	}
	if err := f.admin.Delete("link", nil); err == nil {
		t.Error("Delete of a symbolic link succeeded")
	}
	if err := f.admin.Delete("missing", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete of a missing session: err = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("victim touched: %v", err)
	}
	infos, _ := f.admin.List()
	if diff := cmp.Diff([]string{"busy", "done", "stale"}, ids(infos)); diff != "" {
		t.Errorf("List shows (-want +got):\n%s", diff)
	}
}

func TestSelect(t *testing.T) {
	f := newRetentionFixture(t)
	now := f.clock.Now()

	got, failed := f.admin.Select(nil, 0, now)
	if diff := cmp.Diff([]string{"busy", "done", "stale"}, ids(got)); diff != "" || len(failed) != 0 {
		t.Errorf("no names: failed %v, ids (-want +got):\n%s", failed, diff)
	}
	got, failed = f.admin.Select([]string{"stale", "nope", "done", "stale", "../busy"}, 0, now)
	if diff := cmp.Diff([]string{"stale", "done"}, ids(got)); diff != "" {
		t.Errorf("named: ids (-want +got):\n%s", diff)
	}
	if len(failed) != 2 || !errors.Is(failed[0], ErrNotFound) || !strings.HasPrefix(failed[0].Error(), "nope: ") ||
		!strings.HasPrefix(failed[1].Error(), "../busy: ") {
		t.Errorf("named: failed %v, want nope (not found) and ../busy", failed)
	}

	// Idle: the open session's owner renews its lease, which keeps it
	// active; the others' leases ended at most a lease after the start.
	for range 6 {
		f.clock.Advance(20 * time.Second)
		if err := f.busy.RenewLease(); err != nil {
			t.Fatal(err)
		}
	}
	later := f.clock.Now()
	got, _ = f.admin.Select(nil, time.Minute, later)
	if diff := cmp.Diff([]string{"done", "stale"}, ids(got)); diff != "" {
		t.Errorf("idle a minute, two minutes on: ids (-want +got):\n%s", diff)
	}
	if got, _ = f.admin.Select(nil, 100*time.Second, later); len(got) != 0 {
		t.Errorf("idle 100s, two minutes on: %v, want none", ids(got))
	}
	got, _ = f.admin.Select([]string{"busy", "done"}, time.Minute, later)
	if diff := cmp.Diff([]string{"done"}, ids(got)); diff != "" {
		t.Errorf("named and idle: ids (-want +got):\n%s", diff)
	}
}
