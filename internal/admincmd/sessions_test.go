package admincmd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/sessionstore"
)

// newSessionVolume makes a CLAUDE_CONFIG_DIR with sessions: "old" (closed
// 60 days ago), "recent" (closed now) and "busy" (open, so leased by
// worker-a).
func newSessionVolume(t *testing.T) (dir string, busy *sessionstore.Session) {
	t.Helper()
	dir = t.TempDir()
	projects := filepath.Join(dir, "projects")
	mk := func(id string, at time.Time) *sessionstore.Session {
		st, err := sessionstore.New(projects, &sessionstore.Options{Holder: "worker-a", Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		s, _, err := st.Create(id, sessionstore.Meta{Harness: "native", CreatedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if err := s.AppendEvent(&contract.Event{Kind: contract.KindTextDelta, Text: "hello", Time: at}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := mk("old", time.Now().Add(-60*24*time.Hour)).Close(); err != nil {
		t.Fatal(err)
	}
	if err := mk("recent", time.Now()).Close(); err != nil {
		t.Fatal(err)
	}
	busy = mk("busy", time.Now())
	t.Cleanup(func() { busy.Close() })
	return dir, busy
}

func sessionsCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), append([]string{"sessions"}, args...), cli.Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	return out.String(), errb.String(), err
}

// tree records every path under dir with its size and modification time.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fmt.Sprintf("%s %s %d", fi.Mode(), fi.ModTime(), fi.Size())
		return nil
	})
	return out
}

func listedIDs(t *testing.T, dir string) []string {
	t.Helper()
	out, errs, err := sessionsCmd(t, "list", "--claude-config-dir", dir)
	if err != nil {
		t.Fatalf("sessions list: %v\n%s", err, errs)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		ids = append(ids, strings.Fields(line)[0])
	}
	return ids
}

func TestSessionsList(t *testing.T) {
	dir, _ := newSessionVolume(t)
	out, _, err := sessionsCmd(t, "list", "--claude-config-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("list:\n%s", out)
	}
	byID := map[string]string{}
	for _, l := range lines[1:] {
		byID[strings.Fields(l)[0]] = l
	}
	if !strings.Contains(byID["busy"], "held by worker-a until") {
		t.Errorf("busy's lease not shown as held: %q", byID["busy"])
	}
	if !strings.Contains(byID["recent"], "released by worker-a") || !strings.Contains(byID["old"], "released") {
		t.Errorf("released leases not shown: %q / %q", byID["recent"], byID["old"])
	}
	if f := strings.Fields(byID["old"]); f[1] != time.Now().Add(-60*24*time.Hour).UTC().Format("2006-01-02") {
		t.Errorf("old's creation date: %q", byID["old"])
	}

	out, _, err = sessionsCmd(t, "list", "--claude-config-dir", dir, "--idle-for", "720h")
	if err != nil || len(strings.Split(strings.TrimSpace(out), "\n")) != 2 || !strings.Contains(out, "old") {
		t.Errorf("list --idle-for 720h = %v:\n%s", err, out)
	}
	t.Setenv("CLAUDE_CONFIG_DIR", dir)
	if _, _, err := sessionsCmd(t, "list", "--id", "recent"); err != nil {
		t.Errorf("list from $CLAUDE_CONFIG_DIR: %v", err)
	}
}

func TestSessionsDryRunChangesNothing(t *testing.T) {
	dir, _ := newSessionVolume(t)
	before := tree(t, dir)
	out, _, err := sessionsCmd(t, "archive", "--claude-config-dir", dir, "--id", "old", "--id", "recent", "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "would archive old -> "+filepath.Join(dir, "archive", "projects", "old-")) || !strings.Contains(out, "would archive recent") {
		t.Errorf("dry-run archive printed:\n%s", out)
	}
	out, _, err = sessionsCmd(t, "delete", "--claude-config-dir", dir, "--idle-for", "720h", "--dry-run")
	if err != nil || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "would delete old (") {
		t.Errorf("dry-run delete = %v:\n%s", err, out)
	}
	if _, _, err := sessionsCmd(t, "delete", "--claude-config-dir", dir, "--id", "busy", "--dry-run"); err == nil {
		t.Error("dry-run delete of a leased session reported success")
	}
	if diff := cmp.Diff(before, tree(t, dir)); diff != "" {
		t.Fatalf("dry run changed the volume (-before +after):\n%s", diff)
	}
}

func TestSessionsArchiveAndDelete(t *testing.T) {
	dir, busy := newSessionVolume(t)

	// Nothing is selected implicitly.
	if _, _, err := sessionsCmd(t, "delete", "--claude-config-dir", dir); err == nil {
		t.Fatal("delete without --id or --idle-for succeeded")
	}
	// A live lease is refused, and the owner is undisturbed.
	_, errs, err := sessionsCmd(t, "archive", "--claude-config-dir", dir, "--id", "busy")
	if err == nil || !strings.Contains(errs, "held by worker-a") {
		t.Fatalf("archive of a leased session = %v, stderr %q", err, errs)
	}
	if err := busy.AppendEvent(&contract.Event{Kind: contract.KindTextDelta}); err != nil {
		t.Fatalf("owner after a refused archive: %v", err)
	}

	// Archive: gone from the list, present in the archive.
	out, _, err := sessionsCmd(t, "archive", "--claude-config-dir", dir, "--id", "recent")
	if err != nil {
		t.Fatal(err)
	}
	archived, _ := filepath.Glob(filepath.Join(dir, "archive", "projects", "recent-*"))
	if len(archived) != 1 || !strings.Contains(out, "archived recent -> "+archived[0]) {
		t.Fatalf("archive printed %q; archive holds %v", out, archived)
	}
	if _, err := os.Stat(filepath.Join(archived[0], "events.jsonl")); err != nil {
		t.Errorf("archived session lacks its event log: %v", err)
	}
	if diff := cmp.Diff([]string{"busy", "old"}, listedIDs(t, dir)); diff != "" {
		t.Errorf("after archive (-want +got):\n%s", diff)
	}

	// Delete by idleness: old goes, busy stays.
	if out, _, err = sessionsCmd(t, "delete", "--claude-config-dir", dir, "--idle-for", "720h"); err != nil || !strings.HasPrefix(out, "deleted old") {
		t.Fatalf("delete --idle-for = %v, %q", err, out)
	}
	if diff := cmp.Diff([]string{"busy"}, listedIDs(t, dir)); diff != "" {
		t.Errorf("after delete (-want +got):\n%s", diff)
	}

	// --force takes the live one.
	if _, errs, err := sessionsCmd(t, "delete", "--claude-config-dir", dir, "--id", "busy", "--force"); err != nil {
		t.Fatalf("forced delete: %v %s", err, errs)
	}
	if ids := listedIDs(t, dir); len(ids) != 0 {
		t.Errorf("after forced delete: %v", ids)
	}
}

func TestSessionsRefuses(t *testing.T) {
	dir, _ := newSessionVolume(t)
	outside := filepath.Join(dir, "victim")
	os.MkdirAll(outside, 0o700)
	before := tree(t, dir)
	tests := map[string][]string{
		"traversal":         {"delete", "--claude-config-dir", dir, "--id", "../victim"},
		"dot-dot":           {"archive", "--claude-config-dir", dir, "--id", ".."},
		"slash":             {"delete", "--claude-config-dir", dir, "--id", "old/../../victim"},
		"missing":           {"delete", "--claude-config-dir", dir, "--id", "nope"},
		"stray argument":    {"delete", "--claude-config-dir", dir, "old"},
		"no dir":            {"list", "--claude-config-dir", ""},
		"no projects there": {"list", "--claude-config-dir", outside},
		"unknown command":   {"purge"},
		"negative idle":     {"list", "--claude-config-dir", dir, "--idle-for", "-1h"},
	}
	t.Setenv("CLAUDE_CONFIG_DIR", "")
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			if _, _, err := sessionsCmd(t, args...); err == nil {
				t.Fatalf("talkide sessions %v succeeded", args)
			}
		})
	}
	if diff := cmp.Diff(before, tree(t, dir)); diff != "" {
		t.Fatalf("a refused command changed the volume (-before +after):\n%s", diff)
	}
	if _, _, err := sessionsCmd(t); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("no arguments: err = %v, want flag.ErrHelp", err)
	}
}

// A lease whose holder's beats in the replica registry have ended is
// judged as the replicas judge it: not live, though it has not expired. A
// holder still beating keeps it.
func TestSessionsHolderGone(t *testing.T) {
	dir, busy := newSessionVolume(t)
	beatAt := func(at time.Time) {
		t.Helper()
		entry := fmt.Sprintf(`{"holder":"worker-a","addr":"http://10.0.0.1:8080","updated_at":%q,"beat_window_ms":10000}`, at.UTC().Format(time.RFC3339Nano))
		if err := os.MkdirAll(filepath.Join(dir, "replicas"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "replicas", "worker-a.json"), []byte(entry), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	beatAt(time.Now())
	if _, errs, err := sessionsCmd(t, "archive", "--claude-config-dir", dir, "--id", "busy"); err == nil || !strings.Contains(errs, "held by worker-a") {
		t.Fatalf("archive of a session whose holder beats = %v, stderr %q", err, errs)
	}
	beatAt(time.Now().Add(-13 * time.Second))
	out, errs, err := sessionsCmd(t, "list", "--claude-config-dir", dir)
	if err != nil || !strings.Contains(out, "holder gone (worker-a, its beats ended") {
		t.Fatalf("list = %v, %s\n%s", err, errs, out)
	}
	if !time.Now().Before(busy.LeaseExpires()) {
		t.Fatal("the lease had expired anyway: the test shows nothing")
	}
	if out, errs, err := sessionsCmd(t, "delete", "--claude-config-dir", dir, "--id", "busy"); err != nil || !strings.HasPrefix(out, "deleted busy") {
		t.Fatalf("delete of a session whose holder is gone = %v, %q %s", err, out, errs)
	}
}
