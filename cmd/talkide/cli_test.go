package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/talkide/platform/internal/cli"
	"github.com/talkide/platform/internal/roles/rolestest"
)

// talkide runs the command line args as the binary would, and returns its
// exit code, stdout and stderr.
func talkide(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := execute(context.Background(), args, stdio{in: strings.NewReader(""), out: &out, err: &errb})
	return code, out.String(), errb.String()
}

// commandPaths lists every command of the tree as its arguments, e.g.
// ["admin", "budget", "set"].
func commandPaths(c *cobra.Command, prefix []string) [][]string {
	var out [][]string
	for _, s := range c.Commands() {
		if s.Hidden || s.Name() == "help" {
			continue
		}
		p := append(slices.Clone(prefix), s.Name())
		out = append(out, p)
		out = append(out, commandPaths(s, p)...)
	}
	return out
}

// TestEveryCommandAnswersHelp walks the whole tree: --help and -h exit 0
// at every level and show every flag of the command.
func TestEveryCommandAnswersHelp(t *testing.T) {
	root := newRoot(stdio{})
	paths := append([][]string{{}}, commandPaths(root, nil)...)
	if len(paths) < 20 {
		t.Fatalf("the tree has only %d commands: %v", len(paths), paths)
	}
	for _, p := range paths {
		cmd, _, err := root.Find(p)
		if err != nil {
			t.Fatalf("find %v: %v", p, err)
		}
		for _, h := range []string{"--help", "-h"} {
			args := append(slices.Clone(p), h)
			code, out, errs := talkide(t, args...)
			if code != exitOK {
				t.Errorf("talkide %s: exit %d, stderr %q", strings.Join(args, " "), code, errs)
				continue
			}
			if !strings.Contains(out, "Usage:") {
				t.Errorf("talkide %s: no usage in\n%s", strings.Join(args, " "), out)
			}
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				if !f.Hidden && !strings.Contains(out, "--"+f.Name) {
					t.Errorf("talkide %s does not show --%s", strings.Join(args, " "), f.Name)
				}
			})
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := map[string]struct {
		args    []string
		stderr  string // a line the error must say
		suggest string
	}{
		"unknown top command":   {[]string{"sesions"}, `talkide: unknown command "sesions"`, `"sessions"`},
		"unknown admin command": {[]string{"admin", "budgte"}, `talkide admin: unknown command "budgte"`, `"budget"`},
		"unknown leaf":          {[]string{"admin", "budget", "stauts"}, `unknown command "stauts"`, `"status"`},
		"unknown flag":          {[]string{"dev", "--data-dirr", "x"}, "unknown flag: --data-dirr", "--data-dir"},
		"unknown flag of leaf":  {[]string{"admin", "usage", "--oder", "cost"}, "unknown flag: --oder", "--order"},
		"stray argument":        {[]string{"admin", "env", "list", "extra"}, `unexpected argument "extra"`, ""},
		"bad flag value":        {[]string{"sessions", "list", "--idle-for", "soon"}, "invalid argument", ""},
		"missing command":       {[]string{"admin", "token"}, "missing command", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, _, errs := talkide(t, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitUsage, errs)
			}
			first, _, _ := strings.Cut(errs, "\n")
			if name == "missing command" {
				// The help comes first, then the one-line error.
				lines := strings.Split(strings.TrimSpace(errs), "\n")
				first = lines[len(lines)-1]
			}
			if !strings.Contains(first, tc.stderr) {
				t.Errorf("error line %q does not say %q (stderr:\n%s)", first, tc.stderr, errs)
			}
			if tc.suggest != "" && !strings.Contains(first, "did you mean "+tc.suggest) {
				t.Errorf("error line %q does not suggest %s", first, tc.suggest)
			}
		})
	}
	// Bare talkide shows its help and fails as a usage error, as before.
	if code, _, errs := talkide(t); code != exitUsage || !strings.Contains(errs, "talkide dev") {
		t.Errorf("bare talkide: exit %d, stderr:\n%s", code, errs)
	}
	if err := run(context.Background(), []string{"admin"}, stdio{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &bytes.Buffer{}}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("bare admin: %v, want an error that is flag.ErrHelp", err)
	}
}

func TestVersionAndCompletion(t *testing.T) {
	code, out, _ := talkide(t, "--version")
	if code != exitOK || !strings.HasPrefix(out, "talkide ") || !strings.Contains(out, "go1.") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	for shell, marker := range map[string]string{"bash": "complete -o default", "zsh": "#compdef talkide", "fish": "complete -c talkide"} {
		code, out, errs := talkide(t, "completion", shell)
		if code != exitOK || !strings.Contains(out, marker) {
			t.Errorf("completion %s: exit %d, stderr %q, output without %q", shell, code, errs, marker)
		}
	}
}

// TestSingleDashLongFlags: the first version's flag package took -name as
// well as --name; scripts written then keep working.
func TestSingleDashLongFlags(t *testing.T) {
	dir, _ := rolestest.NewControlPlaneDir(t)
	code, out, errs := talkide(t, "admin", "env", "list", "-data-dir", dir)
	if code != exitOK || !strings.Contains(out, "no tenant-envs") {
		t.Errorf("-data-dir: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = talkide(t, "admin", "env", "list", "-data-dir="+dir)
	if code != exitOK || !strings.Contains(out, "no tenant-envs") {
		t.Errorf("-data-dir=: exit %d\n%s%s", code, out, errs)
	}
	// Not a flag of the tree: left alone, so it stays an error.
	if code, _, _ := talkide(t, "admin", "env", "list", "-data-dirx", dir); code != exitUsage {
		t.Errorf("-data-dirx: exit %d, want %d", code, exitUsage)
	}
	// After --, nothing is rewritten.
	if got := cli.NormalizeArgs(newRoot(stdio{}), []string{"chat", "-m", "x", "--", "-data-dir"}); got[4] != "-data-dir" {
		t.Errorf("rewrote after --: %v", got)
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	dir, _ := rolestest.NewControlPlaneDir(t)
	empty := t.TempDir()
	t.Setenv("TALKIDE_DATA_DIR", dir)
	if code, out, errs := talkide(t, "admin", "env", "list"); code != exitOK || !strings.Contains(out, "no tenant-envs") {
		t.Errorf("TALKIDE_DATA_DIR: exit %d\n%s%s", code, out, errs)
	}
	// The command line wins over the environment.
	if code, _, errs := talkide(t, "admin", "env", "list", "--data-dir", empty); code != exitError || !strings.Contains(errs, empty) {
		t.Errorf("--data-dir over TALKIDE_DATA_DIR: exit %d, stderr %q", code, errs)
	}
	t.Setenv("TALKIDE_LOG_LEVEL", "loud")
	if code, _, errs := talkide(t, "worker", "--tenant", "a", "--env", "b"); code != exitUsage || !strings.Contains(errs, "loud") {
		t.Errorf("a bad TALKIDE_LOG_LEVEL: exit %d, stderr %q", code, errs)
	}
	t.Setenv("TALKIDE_LOG_LEVEL", "")
	os.Unsetenv("TALKIDE_LOG_LEVEL")
	// What names a command's object never comes from the environment.
	t.Setenv("TALKIDE_ID", "x")
	if code, _, errs := talkide(t, "admin", "token", "revoke"); code != exitError || !strings.Contains(errs, "--id is required") {
		t.Errorf("TALKIDE_ID set --id: exit %d, stderr %q", code, errs)
	}
}

// TestAdminFindsTheDevDataDir: in a folder where only talkide dev ran,
// talkide admin uses its data directory.
func TestAdminFindsTheDevDataDir(t *testing.T) {
	dir, _ := rolestest.NewControlPlaneDir(t)
	work := t.TempDir()
	if err := os.Rename(dir, filepath.Join(work, ".talkide")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	if code, out, errs := talkide(t, "admin", "env", "list"); code != exitOK || !strings.Contains(out, "no tenant-envs") {
		t.Errorf("admin env list beside .talkide: exit %d\n%s%s", code, out, errs)
	}
	t.Chdir(t.TempDir())
	code, _, errs := talkide(t, "admin", "env", "list")
	if code != exitError || !strings.Contains(errs, ".talkide-cp") || !strings.Contains(errs, "talkide dev's") {
		t.Errorf("admin env list with neither: exit %d, stderr %q", code, errs)
	}
}

var update = flag.Bool("update", false, "rewrite the generated parts of docs/cli.md")

// envTable renders the table of every environment variable that sets a
// flag: the variable, the flag, and the commands that take it ("admin env
// …" for every command under admin env).
func envTable(root *cobra.Command) string {
	type row struct{ env, flag string }
	takes := map[row]map[string]bool{}
	var leaves []string
	for _, p := range commandPaths(root, nil) {
		cmd, _, _ := root.Find(p)
		if cmd.HasSubCommands() {
			continue
		}
		leaves = append(leaves, strings.Join(p, " "))
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if env, ok := cli.EnvOf(f); ok {
				r := row{env, f.Name}
				if takes[r] == nil {
					takes[r] = map[string]bool{}
				}
				takes[r][strings.Join(p, " ")] = true
			}
		})
	}
	rows := slices.Collect(maps.Keys(takes))
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.env+a.flag, b.env+b.flag) })
	var b strings.Builder
	b.WriteString("| variable | flag | commands |\n|---|---|---|\n")
	for _, r := range rows {
		// The widest group whose every leaf takes the flag is named once.
		var names []string
		done := map[string]bool{}
		for _, l := range leaves {
			if !takes[r][l] || done[l] {
				continue
			}
			words := strings.Split(l, " ")
			name := l
			for depth := 1; depth < len(words); depth++ {
				prefix := strings.Join(words[:depth], " ") + " "
				all := true
				for _, m := range leaves {
					if strings.HasPrefix(m, prefix) && !takes[r][m] {
						all = false
					}
				}
				if all {
					name = prefix + "…"
					for _, m := range leaves {
						if strings.HasPrefix(m, prefix) {
							done[m] = true
						}
					}
					break
				}
			}
			names = append(names, name)
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | %s |\n", r.env, r.flag, strings.Join(names, ", "))
	}
	return b.String()
}

// TestCLIReferenceIsCurrent keeps docs/cli.md's table of environment
// variables equal to the tree's; go test -run CLIReference -update
// rewrites it.
func TestCLIReferenceIsCurrent(t *testing.T) {
	const begin, end = "<!-- env-table:begin (generated: go test ./cmd/talkide -run CLIReference -update) -->\n", "<!-- env-table:end -->"
	path := filepath.Join("..", "..", "docs", "cli.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q … %q", path, begin, end)
	}
	want := envTable(newRoot(stdio{}))
	if got := doc[i+len(begin) : j]; got != want {
		if *update {
			if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/cli.md's environment table is stale; run go test ./cmd/talkide -run CLIReference -update\n(-doc +tree):\n%s", cmp.Diff(got, want))
	}
}

func TestSandboxCommands(t *testing.T) {
	code, out, errs := talkide(t, "sandbox", "check")
	if code != exitOK || !strings.Contains(out, "landlock") {
		t.Errorf("sandbox check: exit %d, %q %q", code, out, errs)
	}
	ws := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("s3cret"), 0o600)
	code, out, errs = talkide(t, "sandbox", "run", "--workspace", ws, "--", "sh", "-c", "echo hi > f; cat f; cat "+secret)
	if code != exitError || !strings.HasPrefix(out, "hi\n") || strings.Contains(out, "s3cret") {
		t.Errorf("sandbox run: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	// With files for its output (a terminal, a redirect) the command's
	// end is reported before its helper is reaped; the directory the
	// command had of its own is still gone when run returns.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var files [3]*os.File
	for i, name := range []string{"in", "out", "err"} {
		f, err := os.Create(filepath.Join(t.TempDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	if code := execute(context.Background(), []string{"sandbox", "run", "--workspace", ws, "--", "true"}, stdio{in: files[0], out: files[1], err: files[2]}); code != exitOK {
		b, _ := os.ReadFile(files[2].Name())
		t.Fatalf("sandbox run true: exit %d, stderr %q", code, b)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("sandbox run left %v in TMPDIR", left)
	}
}
