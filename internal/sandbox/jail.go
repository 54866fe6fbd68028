package sandbox

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Jail is what every process of one conversation's turn gets: its
// workspace, the worker's proxies and the environment that names them.
// The worker makes one per turn; tools, MCP servers and subprocess
// harnesses start their processes through it, so that none is started
// any other way.
type Jail struct {
	Sandbox   *Sandbox
	Workspace string
	// Env is the environment every process starts with: PATH, HOME, LANG
	// and the proxies' variables. A process adds its own.
	Env []string
	// Ports and Sockets are the worker's proxies (Policy.Ports,
	// Policy.Sockets).
	Ports   []int
	Sockets map[int]string
	// Writable and ReadOnly are more paths every process may change or
	// read (Policy.Writable, Policy.ReadOnly).
	Writable, ReadOnly []string
	Limits             Limits
}

// Command is the policy Policy describes, ready to start.
func (j *Jail) Command(path string, args []string, p Extra) (*Cmd, error) {
	return j.Sandbox.Command(j.Policy(path, args, p))
}

// ExecCommand is Command for a caller that drives the exec.Cmd itself;
// ctx ends the command (Sandbox.ExecCommand).
func (j *Jail) ExecCommand(ctx context.Context, path string, args []string, p Extra) (*Cmd, error) {
	return j.Sandbox.ExecCommand(ctx, j.Policy(path, args, p))
}

// Extra is what one process adds to its jail.
type Extra struct {
	// Env entries override the jail's of the same name.
	Env                []string
	Dir                string
	Writable, ReadOnly []string
	Timeout            time.Duration
	// Limits' non-zero fields override the jail's.
	Limits Limits
}

// Policy returns the policy of program path with args in the jail.
func (j *Jail) Policy(path string, args []string, x Extra) Policy {
	env := slices.Clone(j.Env)
	for _, kv := range x.Env {
		name, _, _ := strings.Cut(kv, "=")
		env = setEnv(env, name, strings.TrimPrefix(kv, name+"="))
	}
	return Policy{
		Path: path, Args: args, Env: env, Dir: x.Dir,
		Workspace: j.Workspace,
		Writable:  append(slices.Clone(j.Writable), x.Writable...),
		ReadOnly:  append(slices.Clone(j.ReadOnly), x.ReadOnly...),
		Ports:     slices.Clone(j.Ports),
		Sockets:   j.Sockets,
		Timeout:   x.Timeout,
		Limits:    x.Limits.or(j.Limits),
	}
}
