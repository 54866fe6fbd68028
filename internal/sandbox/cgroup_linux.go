package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// A pids cgroup per command bounds its tree's tasks in the kernel, for
// every user (RLIMIT_NPROC counts per user, and not at all for root), and
// lists every process of the tree however it forked. It needs a pids
// hierarchy the worker may create groups in: cgroup v1's pids controller,
// or a cgroup v2 group delegated to the worker with pids enabled. A
// restricted Kubernetes pod usually has neither; the sandbox then relies
// on the supervisor's count.

// supervisorTasks is the room a command's cgroup leaves for the
// supervisor's own threads beside the command's Limits.MaxProcs.
const supervisorTasks = 48

// pidsCgroups makes the commands' groups under one parent of the worker.
type pidsCgroups struct {
	parent string
	v2     bool
}

// cgroupSeq names the commands' groups. It is the process's, not a
// Sandbox's: every Sandbox of a process shares the parent group, which is
// named after the process.
var cgroupSeq atomic.Uint64

// newPidsCgroups finds a pids hierarchy and makes the worker's parent
// group in it, or says why it cannot.
func newPidsCgroups() (*pidsCgroups, error) {
	mount, own, v2, err := pidsHierarchy()
	if err != nil {
		return nil, err
	}
	base := filepath.Join(mount, own)
	removeStale(base)
	parent := filepath.Join(base, fmt.Sprintf("talkide-sandbox-%d", os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup %s: %w", parent, err)
	}
	if v2 {
		// Children of parent get the pids controller only when parent
		// passes it on (and parent holds no process, which it never does).
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
			os.Remove(parent)
			return nil, fmt.Errorf("cgroup %s: enable pids: %w", parent, err)
		}
	}
	return &pidsCgroups{parent: parent, v2: v2}, nil
}

// removeStale removes the empty parent groups of workers that are gone.
func removeStale(base string) {
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		pid, ok := strings.CutPrefix(e.Name(), "talkide-sandbox-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || syscall.Kill(n, 0) == nil {
			continue
		}
		sub, _ := os.ReadDir(filepath.Join(base, e.Name()))
		for _, g := range sub {
			if g.IsDir() {
				killCgroup(filepath.Join(base, e.Name(), g.Name()))
				os.Remove(filepath.Join(base, e.Name(), g.Name()))
			}
		}
		os.Remove(filepath.Join(base, e.Name()))
	}
}

// close removes the parent group; the commands' groups are gone by then.
func (c *pidsCgroups) close() { os.Remove(c.parent) }

// pidsHierarchy returns the mount point of a pids hierarchy and the
// worker's own group in it.
func pidsHierarchy() (mount, own string, v2 bool, err error) {
	groups, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", false, err
	}
	ownV1, ownV2 := "", ""
	for _, line := range strings.Split(strings.TrimSpace(string(groups)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			ownV2 = f[2]
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "pids" {
				ownV1 = f[2]
			}
		}
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", false, err
	}
	defer mi.Close()
	var v2mount string
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		// id parent major:minor root mountpoint options - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 3 {
			continue
		}
		switch sf[0] {
		case "cgroup":
			for _, o := range strings.Split(sf[2], ",") {
				if o == "pids" && ownV1 != "" {
					return pf[4], ownV1, false, nil
				}
			}
		case "cgroup2":
			v2mount = pf[4]
		}
	}
	if v2mount != "" && ownV2 != "" {
		b, err := os.ReadFile(filepath.Join(v2mount, ownV2, "cgroup.controllers"))
		if err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " pids ") {
			return v2mount, ownV2, true, nil
		}
	}
	return "", "", false, errors.New("no pids cgroup hierarchy")
}

// create makes a command's group with room for max tasks.
func (c *pidsCgroups) create(max int) (string, error) {
	dir := filepath.Join(c.parent, strconv.FormatUint(cgroupSeq.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	if err := setPidsMax(dir, max); err != nil {
		os.Remove(dir)
		return "", err
	}
	return dir, nil
}

// setPidsMax bounds the tasks of a command's group.
func setPidsMax(dir string, max int) error {
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0); err != nil {
		return fmt.Errorf("cgroup pids.max: %w", err)
	}
	return nil
}

// remove ends whatever is left in a command's group and removes it. It
// first lowers the group's pids.max to 0, so that nothing left can fork
// while it is being killed: a fork bomb that outlived its supervisor would
// otherwise refill the group as fast as its processes are killed.
func (c *pidsCgroups) remove(dir string) {
	os.WriteFile(filepath.Join(dir, "pids.max"), []byte("0"), 0)
	if c.v2 {
		// cgroup.kill (Linux 5.14) kills the whole group at once; where it
		// is missing, the loop below does it.
		os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	}
	for range 500 {
		killCgroup(dir)
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond) // the kernel is still tearing tasks down
	}
}

// hitMax reports whether the group refused a fork for its pids.max: its
// tree reached the bound.
func hitMax(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "pids.events"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "max "); ok && n != "0" {
			return true
		}
	}
	return false
}

// enterCgroup moves process pid (0: the caller) into dir.
func enterCgroup(dir string, pid int) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// killCgroup sends SIGKILL to every process in dir; it reports whether
// any was left.
func killCgroup(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	any := false
	self := os.Getpid()
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != self {
			syscall.Kill(pid, syscall.SIGKILL)
			any = true
		}
	}
	return any
}
