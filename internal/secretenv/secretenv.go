// Package secretenv takes a role's secrets out of its environment. A
// secret given in the environment stays in /proc/<pid>/environ for the
// life of the process, whatever os.Unsetenv does, and every process the
// worker starts would inherit it unless each start scrubs it. So the roles
// that take secrets from the environment (as the seam names them) read
// them once: the process re-executes itself without them, handing them
// over in an unlinked memory file that it reads and closes at once. After
// that no environment of any process holds them.
package secretenv

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Roles are the variables each role (a subcommand of talkide) may be given a secret in.
var Roles = map[string][]string{
	"worker":    {"TALKIDE_WORKER_IDENTITY_TOKEN", "TALKIDE_WORKER_COMMAND_KEY"},
	"dev":       {"ANTHROPIC_API_KEY"},
	"simulator": {"ANTHROPIC_API_KEY"},
}

// handOverFD names the descriptor of the handed-over secrets after the
// re-execution; its value is a number, not a secret.
const handOverFD = "TALKIDE_HANDED_OVER_SECRETS_FD"

// handedOver holds the secrets read back after the re-execution: one
// process, one hand-over, before any role starts.
var handedOver map[string]string

// HandOver is called first in main, with os.Args. After a re-execution it reads
// the secrets back; otherwise, when the command's role was given secrets
// in its environment, it re-executes the binary without them (and does
// not return).
func HandOver(args []string) error {
	if v, ok := os.LookupEnv(handOverFD); ok {
		os.Unsetenv(handOverFD)
		fd, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%s=%q is not a descriptor", handOverFD, v)
		}
		f := os.NewFile(uintptr(fd), "secrets")
		defer f.Close()
		return json.NewDecoder(f).Decode(&handedOver)
	}
	if len(args) < 2 {
		return nil
	}
	names := Roles[args[1]]
	secrets := map[string]string{}
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok {
			secrets[n] = v
		}
	}
	if len(secrets) == 0 {
		return nil
	}
	fd, err := unix.MemfdCreate("talkide-secrets", 0) // inherited across exec
	if err != nil {
		return fmt.Errorf("hand over the environment's secrets: %w", err)
	}
	f := os.NewFile(uintptr(fd), "secrets")
	if err := json.NewEncoder(f).Encode(secrets); err != nil {
		return fmt.Errorf("hand over the environment's secrets: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return fmt.Errorf("hand over the environment's secrets: %w", err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, name)
	})
	env = append(env, handOverFD+"="+strconv.Itoa(fd))
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("hand over the environment's secrets: %w", err)
	}
	return fmt.Errorf("hand over the environment's secrets: %w", syscall.Exec(exe, args, env))
}

// Get returns the secret named name: handed over, or (a process that
// did not re-execute, such as a test) from the environment.
func Get(name string) string {
	if v, ok := handedOver[name]; ok {
		return v
	}
	return os.Getenv(name)
}

// Undumpable makes the process's memory, environment and descriptors
// unreadable through /proc to every process but root's: one of the same
// user (an agent command run without a sandbox) cannot read them.
func Undumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
