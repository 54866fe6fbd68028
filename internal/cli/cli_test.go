package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/cobra"

	"github.com/talkide/platform/internal/contract"
)

// tree is a small command tree: "t g leaf" whose run returns err, with a
// --name flag bound to $TALKIDE_NAME and a --count flag bound to nothing.
func tree(err error, got *string) *cobra.Command {
	var name string
	var count int
	leaf := &cobra.Command{Use: "leaf", Args: NoArgs, RunE: func(*cobra.Command, []string) error {
		*got = name
		return err
	}}
	leaf.Flags().StringVar(&name, "name", "default", "a name")
	leaf.Flags().IntVar(&count, "count", 0, "a count")
	BindEnv(leaf.Flags(), "name")
	return NewGroup("t", "a test tree", NewGroup("g", "a group", leaf))
}

func execute(t *testing.T, err error, args ...string) (code int, stderr, got string) {
	t.Helper()
	var errb bytes.Buffer
	root := tree(err, &got)
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&errb)
	code = Execute(context.Background(), root, args, &errb)
	return code, errb.String(), got
}

func TestExecute(t *testing.T) {
	failed := errors.New("it broke")
	tests := map[string]struct {
		err    error
		args   []string
		code   int
		stderr string // what stderr must hold; "" for nothing
	}{
		"success":         {nil, []string{"g", "leaf"}, ExitOK, ""},
		"failure":         {failed, []string{"g", "leaf"}, ExitError, "t g leaf: it broke\n"},
		"shown failure":   {&ShownError{failed}, []string{"g", "leaf"}, ExitError, ""},
		"a field refused": {contract.Invalid(nil, "name", "is bad"), []string{"g", "leaf"}, ExitUsage, "t g leaf: --name is bad\nRun 't g leaf --help' for usage.\n"},
		"a stray word":    {nil, []string{"g", "leaf", "x"}, ExitUsage, `unexpected argument "x"`},
		"unknown command": {nil, []string{"g", "lef"}, ExitUsage, `t g: unknown command "lef" (did you mean "leaf"?)`},
		"unknown flag":    {nil, []string{"g", "leaf", "--nmae", "x"}, ExitUsage, "unknown flag: --nmae (did you mean --name?)"},
		"bad flag value":  {nil, []string{"g", "leaf", "--count", "many"}, ExitUsage, "invalid argument"},
		"missing command": {nil, []string{"g"}, ExitUsage, "t g: missing command\n"},
		"help":            {nil, []string{"g", "leaf", "--help"}, ExitOK, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, stderr, _ := execute(t, tc.err, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			if tc.stderr == "" && stderr != "" && code != ExitUsage {
				t.Errorf("stderr %q, want nothing", stderr)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr %q does not hold %q", stderr, tc.stderr)
			}
		})
	}
	var got string
	if err := Run(context.Background(), tree(nil, &got), []string{"g"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("a bare group: %v, want an error that is flag.ErrHelp", err)
	}
}

func TestFlagsFromTheEnvironment(t *testing.T) {
	t.Setenv("TALKIDE_NAME", "from-env")
	t.Setenv("TALKIDE_COUNT", "not a number") // bound to nothing: ignored
	if code, stderr, got := execute(t, nil, "g", "leaf"); code != ExitOK || got != "from-env" {
		t.Errorf("exit %d (%s), name %q; want from-env", code, stderr, got)
	}
	if _, _, got := execute(t, nil, "g", "leaf", "--name", "flag"); got != "flag" {
		t.Errorf("name %q; the command line wins over the environment", got)
	}
	// Single-dash long flags, as the first command line took them.
	if _, _, got := execute(t, nil, "g", "leaf", "-name=dash"); got != "dash" {
		t.Errorf("name %q from -name=dash", got)
	}
	var got string
	root := tree(nil, &got)
	leaf, _, _ := root.Find([]string{"g", "leaf"})
	if env, ok := EnvOf(leaf.Flags().Lookup("name")); !ok || env != "TALKIDE_NAME" || !strings.Contains(leaf.Flags().Lookup("name").Usage, "[$TALKIDE_NAME]") {
		t.Errorf("EnvOf(--name) = %q, %v; usage %q", env, ok, leaf.Flags().Lookup("name").Usage)
	}
	if _, ok := EnvOf(leaf.Flags().Lookup("count")); ok {
		t.Error("--count is bound")
	}
}

func TestUntilSignal(t *testing.T) {
	sigs := make(chan os.Signal, 3)
	ctx, later, stop := UntilSignal(t.Context(), sigs)
	sigs <- os.Interrupt
	<-ctx.Done()
	sigs <- syscall.SIGTERM
	if s := <-later; s != syscall.SIGTERM {
		t.Errorf("later got %v", s)
	}
	stop()
	stop() // a second stop is harmless

	ctx, later, stop = UntilSignal(t.Context(), nil)
	if later != nil || ctx.Err() != nil {
		t.Error("without signals: a channel, or an ended context")
	}
	stop()
	if ctx.Err() == nil {
		t.Error("stop did not end the context")
	}
}
