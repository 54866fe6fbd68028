// Command talkide is the TalkIDE platform: one binary, several roles.
//
//	talkide dev           everything on one machine (control-plane, one worker, model simulator)
//	talkide controlplane  the control-plane (browser API, gateway-proxy, mint, reports)
//	talkide worker        the per-tenant-env agent worker
//	talkide chat          a terminal client of a conversation
//	talkide admin         operators: tenant-envs, identity tokens, worker Secrets, budgets, usage
//	talkide sessions      retention: list, archive, delete sessions
//
// This package is flags, wiring, signals and output; what the roles do
// lives in internal/, the admin and sessions trees in internal/admincmd.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/talkide/platform/internal/sandbox"
	_ "github.com/talkide/platform/internal/sandbox/helperentry" // the helper, before the rest initialises
	"github.com/talkide/platform/internal/secretenv"
)

func main() {
	// Re-executed as the sandbox's helper, the binary confines itself and
	// runs an agent command; nothing else of it runs then.
	sandbox.RunHelper()
	if err := secretenv.HandOver(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "talkide:", err)
		os.Exit(exitError)
	}
	// A descriptor inherited from whoever started talkide (a shell's
	// 9<file) must reach no process it starts.
	if err := sandbox.CloseOnExecInherited(); err != nil {
		fmt.Fprintln(os.Stderr, "talkide:", err)
		os.Exit(exitError)
	}
	// Each command decides what a signal means: the servers stop on the
	// first (talkide dev cuts its grace period short on the second); the
	// chat client interrupts the running turn on the first Ctrl-C.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	code := execute(context.Background(), os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr, signals: sigs})
	os.Exit(code)
}
