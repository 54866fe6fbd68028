package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/talkide/platform/internal/sessionstore"
)

const sessionsUsage = `usage: talkide sessions <list|archive|delete> [flags]

  list     show the sessions on a session volume: id, created, last event,
           events, size, lease
  archive  move sessions to DIR/archive/projects/<id>-<UTC time>
  delete   remove sessions for good

Sessions are never removed implicitly: archive and delete act only on the
sessions named with --id (repeatable) and/or selected with --idle-for, and
refuse a session whose lease is live unless --force. --dry-run shows what
would happen and changes nothing. See docs/operations.md.
Run "talkide sessions <command> -h" for flags.
`

// idList is a repeatable --id flag.
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }

func (l *idList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// runSessions lists, archives or deletes sessions on a session volume.
func runSessions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 1 {
		fmt.Fprint(stderr, sessionsUsage)
		return flag.ErrHelp
	}
	cmd := args[0]
	if cmd != "list" && cmd != "archive" && cmd != "delete" {
		fmt.Fprint(stderr, sessionsUsage)
		return fmt.Errorf("unknown command %q", cmd)
	}
	fs := flag.NewFlagSet("sessions "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		ids        idList
		dir        string
		archiveDir string
		idle       time.Duration
		dryRun     bool
		force      bool
	)
	fs.StringVar(&dir, "claude-config-dir", os.Getenv("CLAUDE_CONFIG_DIR"), "the session volume: the worker's CLAUDE_CONFIG_DIR, holding projects/ (default $CLAUDE_CONFIG_DIR)")
	fs.Var(&ids, "id", "a session (conversation) id; repeat for several")
	fs.DurationVar(&idle, "idle-for", 0, "only sessions idle at least this long: no event, lease or creation more recent (e.g. 720h)")
	if cmd != "list" {
		fs.BoolVar(&dryRun, "dry-run", false, "print what would happen and change nothing")
		fs.BoolVar(&force, "force", false, "also act on a session whose lease is live, taking the lease over (only when its holder is gone)")
	}
	if cmd == "archive" {
		fs.StringVar(&archiveDir, "archive-dir", "", "where sessions go, on the same filesystem (default CLAUDE-CONFIG-DIR/archive/projects)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (name sessions with --id)", fs.Arg(0))
	}
	if dir == "" {
		return errors.New("--claude-config-dir (or CLAUDE_CONFIG_DIR) is required")
	}
	if idle < 0 {
		return fmt.Errorf("--idle-for %s: want a positive duration", idle)
	}
	if cmd != "list" && len(ids) == 0 && idle == 0 {
		return fmt.Errorf("name the sessions to %s: --id ID (repeatable) and/or --idle-for DURATION; nothing is removed implicitly", cmd)
	}
	projects := filepath.Join(dir, "projects")
	if fi, err := os.Stat(projects); err != nil || !fi.IsDir() {
		return fmt.Errorf("no session directory at %s (is --claude-config-dir the worker's CLAUDE_CONFIG_DIR?)", projects)
	}
	host, _ := os.Hostname()
	st, err := sessionstore.New(projects, &sessionstore.Options{Holder: "talkide-sessions-" + host + "-" + strconv.Itoa(os.Getpid())})
	if err != nil {
		return err
	}
	now := time.Now()
	selected, failed := selectSessions(st, ids, idle, now, stderr)
	switch cmd {
	case "list":
		if err := printSessions(stdout, selected, now); err != nil {
			return err
		}
	case "archive":
		if archiveDir == "" {
			archiveDir = filepath.Join(dir, "archive", "projects")
		}
		opts := &sessionstore.RetentionOptions{DryRun: dryRun, Force: force}
		for _, s := range selected {
			dest, err := st.Archive(s.ID, archiveDir, opts)
			if err != nil {
				failed++
				fmt.Fprintf(stderr, "%s: not archived: %v%s\n", s.ID, err, forceHint(err))
				continue
			}
			fmt.Fprintf(stdout, "%s %s -> %s\n", verb(dryRun, "archived"), s.ID, dest)
		}
	case "delete":
		opts := &sessionstore.RetentionOptions{DryRun: dryRun, Force: force}
		for _, s := range selected {
			if err := st.Delete(s.ID, opts); err != nil {
				failed++
				fmt.Fprintf(stderr, "%s: not deleted: %v%s\n", s.ID, err, forceHint(err))
				continue
			}
			fmt.Fprintf(stdout, "%s %s (%s)\n", verb(dryRun, "deleted"), s.ID, formatSize(s.Size))
		}
	}
	if cmd != "list" && len(selected) == 0 && failed == 0 {
		fmt.Fprintln(stdout, "no session selected")
	}
	if failed > 0 {
		return fmt.Errorf("%d session(s) failed (see above)", failed)
	}
	return nil
}

// selectSessions returns the sessions named by ids (all when none) that
// have been idle at least idle, and how many names failed.
func selectSessions(st *sessionstore.Store, ids []string, idle time.Duration, now time.Time, stderr io.Writer) ([]sessionstore.SessionInfo, int) {
	var all []sessionstore.SessionInfo
	failed := 0
	if len(ids) == 0 {
		var err error
		if all, err = st.List(); err != nil {
			fmt.Fprintf(stderr, "list: %v\n", err)
			return nil, 1
		}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		info, err := st.Info(id)
		if err != nil {
			failed++
			fmt.Fprintf(stderr, "%s: %v\n", id, err)
			continue
		}
		all = append(all, info)
	}
	if idle <= 0 {
		return all, failed
	}
	var out []sessionstore.SessionInfo
	for _, s := range all {
		if now.Sub(s.LastActive()) >= idle {
			out = append(out, s)
		}
	}
	return out, failed
}

func printSessions(w io.Writer, infos []sessionstore.SessionInfo, now time.Time) error {
	if len(infos) == 0 {
		_, err := fmt.Fprintln(w, "no sessions")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tLAST EVENT\tEVENTS\tSIZE\tLEASE\tNOTE")
	for _, s := range infos {
		note := ""
		if s.Problem != nil {
			note = s.Problem.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, formatTime(s.CreatedAt), formatTime(s.LastEvent),
			s.LastSeq, formatSize(s.Size), describeLease(s.Lease, now), note)
	}
	return tw.Flush()
}

func describeLease(l sessionstore.LeaseInfo, now time.Time) string {
	switch {
	case l.Fence == 0:
		return "-"
	case l.Live(now):
		return fmt.Sprintf("held by %s until %s", l.Holder, formatTime(l.ExpiresAt))
	case l.Released:
		return "released by " + l.Holder
	}
	return fmt.Sprintf("expired (%s, %s)", l.Holder, formatTime(l.ExpiresAt))
}

func formatSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// verb is "archived" or, in a dry run, "would archive".
func verb(dryRun bool, past string) string {
	if dryRun {
		return "would " + strings.TrimSuffix(past, "d")
	}
	return past
}

func forceHint(err error) string {
	if errors.Is(err, sessionstore.ErrLeaseHeld) {
		return " (a worker owns it; --force only if that worker is gone)"
	}
	return ""
}
