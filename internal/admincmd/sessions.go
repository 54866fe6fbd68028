package admincmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/replicaset"
	"github.com/talkide/platform/internal/sessionstore"
)

// NewSessions returns the `sessions` tree, which reads from and writes to
// std.
func NewSessions(std cli.Stdio) *cobra.Command {
	g := cli.NewGroup("sessions", "List, archive or delete sessions on a session volume",
		newSessionsLeaf(std, "list", "Show the sessions on a session volume: id, created, last event, events, size, lease"),
		newSessionsLeaf(std, "archive", "Move sessions to DIR/archive/projects/<id>-<UTC time>"),
		newSessionsLeaf(std, "delete", "Remove sessions for good"),
	)
	g.Long = `List, archive or delete the sessions on a session volume (a worker's
CLAUDE_CONFIG_DIR). Sessions are never removed implicitly: archive and delete
act only on the sessions named with --id (repeatable) and/or selected with
--idle-for, and refuse a session whose lease is live unless --force. --dry-run
shows what would happen and changes nothing. See docs/operations.md.`
	return g
}

// newSessionsLeaf returns talkide sessions list, archive or delete.
func newSessionsLeaf(std cli.Stdio, name, short string) *cobra.Command {
	var (
		ids        []string
		dir        string
		archiveDir string
		idle       time.Duration
		dryRun     bool
		force      bool
	)
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cli.NoArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		stdout, stderr := std.Out, std.Err
		if dir == "" {
			return errors.New("--claude-config-dir (or CLAUDE_CONFIG_DIR) is required")
		}
		if idle < 0 {
			return fmt.Errorf("--idle-for %s: want a positive duration", idle)
		}
		if name != "list" && len(ids) == 0 && idle == 0 {
			return fmt.Errorf("name the sessions to %s: --id ID (repeatable) and/or --idle-for DURATION; nothing is removed implicitly", name)
		}
		projects := filepath.Join(dir, "projects")
		if fi, err := os.Stat(projects); err != nil || !fi.IsDir() {
			return fmt.Errorf("no session directory at %s (is --claude-config-dir the worker's CLAUDE_CONFIG_DIR?)", projects)
		}
		host, _ := os.Hostname()
		// A lease is judged as the worker replicas judge it: one whose
		// holder's beats in the registry have ended is not live.
		replicas := filepath.Join(dir, "replicas")
		st, err := sessionstore.New(projects, &sessionstore.Options{
			Holder:       "talkide-sessions-" + host + "-" + strconv.Itoa(os.Getpid()),
			PeerBeatEnds: func(holder string) time.Time { return replicaset.BeatEnds(replicas, holder) },
		})
		if err != nil {
			return err
		}
		now := time.Now()
		selected, problems := st.Select(ids, idle, now)
		for _, err := range problems {
			fmt.Fprintln(stderr, err)
		}
		failed := len(problems)
		switch name {
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
		if name != "list" && len(selected) == 0 && failed == 0 {
			fmt.Fprintln(stdout, "no session selected")
		}
		if failed > 0 {
			return fmt.Errorf("%d session(s) failed (see above)", failed)
		}
		return nil
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "claude-config-dir", os.Getenv("CLAUDE_CONFIG_DIR"), "the session volume: the worker's CLAUDE_CONFIG_DIR, holding projects/ (default $CLAUDE_CONFIG_DIR)")
	fs.StringArrayVar(&ids, "id", nil, "a session (conversation) id; repeat for several")
	fs.DurationVar(&idle, "idle-for", 0, "only sessions idle at least this long: no event, lease or creation more recent (e.g. 720h)")
	if name != "list" {
		fs.BoolVar(&dryRun, "dry-run", false, "print what would happen and change nothing")
		fs.BoolVar(&force, "force", false, "also act on a session whose lease is live, taking the lease over (only when its holder is gone)")
	}
	if name == "archive" {
		fs.StringVar(&archiveDir, "archive-dir", "", "where sessions go, on the same filesystem (default CLAUDE-CONFIG-DIR/archive/projects)")
		cli.BindEnv(fs, "archive-dir")
	}
	return cmd
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, cli.FormatTime(s.CreatedAt), cli.FormatTime(s.LastEvent),
			s.LastSeq, formatSize(s.Size), describeLease(s.Lease, now), note)
	}
	return tw.Flush()
}

func describeLease(l sessionstore.LeaseInfo, now time.Time) string {
	switch {
	case l.Fence == 0:
		return "-"
	case l.Live(now):
		return fmt.Sprintf("held by %s until %s", l.Holder, cli.FormatTime(l.ExpiresAt))
	case l.Released:
		return "released by " + l.Holder
	case now.Before(l.ExpiresAt.Add(sessionstore.MaxClockSkew)):
		return fmt.Sprintf("holder gone (%s, its beats ended %s)", l.Holder, cli.FormatTime(l.BeatEnds))
	}
	return fmt.Sprintf("expired (%s, %s)", l.Holder, cli.FormatTime(l.ExpiresAt))
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
