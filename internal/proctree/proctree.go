// Package proctree reads the host's process tree from /proc: a process's
// descendants and the fields of its stat line. Where there is no /proc it
// finds nothing.
package proctree

import (
	"os"
	"strconv"
	"strings"
)

// Stat returns the fields of /proc/<pid>/stat after the command name, the
// state first and the parent's pid second, or nil when it cannot be read
// (the process is gone). The command name is in parentheses and may hold
// anything, spaces and parentheses too: the fields start after the last
// ')'.
func Stat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// Parent returns pid's parent, and false when it cannot be read.
func Parent(pid int) (int, bool) {
	f := Stat(pid)
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// Descendants lists pid's descendants, breadth-first: its children, then
// theirs. Kernels without CONFIG_PROC_CHILDREN have no list of a task's
// children, so every process's parent is read and the tree built from
// those; a process that starts or ends meanwhile may be missed or listed
// though gone, which a caller killing the tree handles by looking again.
func Descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := Parent(n); ok {
			children[pp] = append(children[pp], n)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		c := children[queue[0]]
		queue = queue[1:]
		out = append(out, c...)
		queue = append(queue, c...)
	}
	return out
}
