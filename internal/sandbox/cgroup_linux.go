package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
//
// A cpu cgroup per command, all of the same weight, has the kernel's
// scheduler share the CPU between commands rather than between threads:
// without it a command running sixteen busy threads takes sixteen times
// the CPU of another conversation's single-threaded one. It needs a cpu
// hierarchy the worker may create groups in (cgroup v1's cpu controller,
// or cpu delegated in v2); without one, commands share the CPU by thread,
// at nice 5.
//
// The commands' groups sit in a parent group of the worker's, beside the
// worker process, never above it: the worker's own threads (its streams,
// its leases) compete with all the commands together, as one entity of
// the default weight, rather than with each of them.

// supervisorTasks is the room a command's cgroup leaves for the
// supervisor's own threads beside the command's Limits.MaxProcs.
const supervisorTasks = 48

// The weight of every command's cpu group: the kernel's default, the
// weight of one task at nice 0, written all the same so that no group
// differs from another whatever the parent's configuration.
const (
	cpuShares = 1024 // v1 cpu.shares
	cpuWeight = 100  // v2 cpu.weight
)

// cfsPeriod is the period of a command's CPU ceiling, the kernel's
// default (v1 keeps it; v2's cpu.max is given it); minQuota the smallest
// quota the kernel takes.
const (
	cfsPeriod = 100 * time.Millisecond
	minQuota  = time.Millisecond
)

// cgroupParent is the worker's parent group in one hierarchy, which the
// commands' groups are made in.
type cgroupParent struct {
	dir string
	v2  bool
}

// cgroups makes each command's groups: a pids group and a cpu group, in
// the hierarchies where the worker may make them (nil: none there). In
// cgroup v2, and where v1 mounts both controllers together, one
// hierarchy holds both, and a command's group is one directory.
type cgroups struct {
	pids, cpu *cgroupParent
	closed    sync.Once
}

// cmdGroups are one command's groups ("": none in that hierarchy); pids
// and cpu are the same directory where one hierarchy holds both.
type cmdGroups struct {
	pids, cpu string
}

// dirs returns the command's group directories, each once.
func (g cmdGroups) dirs() []string {
	var out []string
	for _, d := range []string{g.pids, g.cpu} {
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// enter moves process pid (0: the caller) into every group of the
// command.
func (g cmdGroups) enter(pid int) error {
	for _, d := range g.dirs() {
		if err := enterCgroup(d, pid); err != nil {
			return err
		}
	}
	return nil
}

// cgroupSeq names the commands' groups. It is the process's, not a
// Sandbox's: every Sandbox of a process shares the parent group, which is
// named after the process.
var cgroupSeq atomic.Uint64

// parentUsers counts, for each parent group, the Sandboxes of this process
// using it, so that the last to close removes it. (A process may hold
// several at once, e.g. whole stacks started side by side in one test
// process; when one closed, it removed the group the others still made
// their commands' groups in.) The lock also orders one Sandbox's making
// of the group against another's removing it.
var parentUsers = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

// cgroupController names what a hierarchy is looked for and used for:
// the controller, and the file of a group that shows the controller
// applies to it (a directory made anywhere else has none).
type cgroupController struct {
	name         string
	file, v2File string
}

var (
	pidsController = cgroupController{name: "pids", file: "pids.max", v2File: "pids.max"}
	cpuController  = cgroupController{name: "cpu", file: "cpu.shares", v2File: "cpu.weight"}
)

// newCgroupParent finds ctl's hierarchy and makes the worker's parent
// group in it, or says why it cannot. mount, when set, replaces the
// search: the hierarchy's mount point, the worker in its root (v1).
func newCgroupParent(ctl cgroupController, mount string) (*cgroupParent, error) {
	parentUsers.Lock()
	defer parentUsers.Unlock()
	own, v2 := "/", false
	if mount == "" {
		var err error
		if mount, own, v2, err = hierarchy(ctl.name); err != nil {
			return nil, err
		}
	}
	base := filepath.Join(mount, own)
	removeStale(base)
	parent := filepath.Join(base, fmt.Sprintf("talkide-sandbox-%d", os.Getpid()))
	err := os.Mkdir(parent, 0o755)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup %s: %w", parent, err)
	}
	made := err == nil
	fail := func(err error) (*cgroupParent, error) {
		if made {
			os.Remove(parent)
		}
		return nil, fmt.Errorf("cgroup %s: %w", parent, err)
	}
	file := ctl.file
	if v2 {
		file = ctl.v2File
	}
	// The kernel fills a group with its controllers' files as it makes
	// it: without them this is no hierarchy of ctl's (or, in v2, the
	// worker's group does not pass ctl on to its children).
	if _, err := os.Stat(filepath.Join(parent, file)); err != nil {
		return fail(fmt.Errorf("no %s controller here: %w", ctl.name, err))
	}
	if v2 {
		// Children of parent get the controller only when parent
		// passes it on (and parent holds no process, which it never does).
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+ctl.name), 0); err != nil {
			return fail(fmt.Errorf("enable %s: %w", ctl.name, err))
		}
	}
	parentUsers.n[parent]++
	return &cgroupParent{dir: parent, v2: v2}, nil
}

// release gives up this Sandbox's use of the parent group and removes it
// when no other Sandbox of the process uses it.
func (p *cgroupParent) release() {
	parentUsers.Lock()
	defer parentUsers.Unlock()
	if parentUsers.n[p.dir]--; parentUsers.n[p.dir] > 0 {
		return
	}
	delete(parentUsers.n, p.dir)
	os.Remove(p.dir)
}

// removeStale removes the empty parent groups of workers that are gone.
func removeStale(base string) {
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		pid, ok := strings.CutPrefix(e.Name(), "talkide-sandbox-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil {
			continue
		}
		// EPERM: alive, another user's (a worker not running as root
		// looks at every user's groups).
		if err := syscall.Kill(n, 0); err == nil || errors.Is(err, syscall.EPERM) {
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

// close releases the parent groups, once however often it is called; the
// commands' groups are gone by then.
func (c *cgroups) close() {
	c.closed.Do(func() {
		if c.pids != nil {
			c.pids.release()
		}
		if c.cpu != nil {
			c.cpu.release()
		}
	})
}

// hierarchy returns the mount point of a hierarchy with the controller
// and the worker's own group in it.
func hierarchy(controller string) (mount, own string, v2 bool, err error) {
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
		if slices.Contains(strings.Split(f[1], ","), controller) {
			ownV1 = f[2]
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
			if ownV1 != "" && slices.Contains(strings.Split(sf[2], ","), controller) {
				return pf[4], ownV1, false, nil
			}
		case "cgroup2":
			v2mount = pf[4]
		}
	}
	if v2mount != "" && ownV2 != "" {
		b, err := os.ReadFile(filepath.Join(v2mount, ownV2, "cgroup.controllers"))
		if err == nil && slices.Contains(strings.Fields(string(b)), controller) {
			return v2mount, ownV2, true, nil
		}
	}
	return "", "", false, fmt.Errorf("no %s cgroup hierarchy", controller)
}

// create makes a command's groups for limits l: room for l.MaxProcs
// tasks beside the supervisor's, the common CPU weight and l.CPUs as the
// ceiling.
func (c *cgroups) create(l Limits) (g cmdGroups, err error) {
	n := strconv.FormatUint(cgroupSeq.Add(1), 10)
	defer func() {
		if err != nil {
			c.remove(g)
		}
	}()
	if c.pids != nil {
		if g.pids, err = makeGroup(filepath.Join(c.pids.dir, n)); err != nil {
			return g, err
		}
	}
	if c.cpu != nil {
		if c.pids != nil && c.cpu.dir == c.pids.dir {
			g.cpu = g.pids
		} else if g.cpu, err = makeGroup(filepath.Join(c.cpu.dir, n)); err != nil {
			return g, err
		}
	}
	return g, c.fit(g, l)
}

// makeGroup makes one group.
func makeGroup(dir string) (string, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	return dir, nil
}

// fit sets a command's groups to limits l: a helper started ahead has
// its groups made for the sandbox's defaults, and its command may ask
// for others.
func (c *cgroups) fit(g cmdGroups, l Limits) error {
	if g.pids != "" {
		if err := setPidsMax(g.pids, l.MaxProcs+supervisorTasks); err != nil {
			return err
		}
	}
	if g.cpu != "" {
		if err := setCPU(g.cpu, c.cpu.v2, l.CPUs); err != nil {
			return err
		}
	}
	return nil
}

// setPidsMax bounds the tasks of a command's group.
func setPidsMax(dir string, max int) error {
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0); err != nil {
		return fmt.Errorf("cgroup pids.max: %w", err)
	}
	return nil
}

// setCPU gives a command's cpu group the common weight and a ceiling of
// cpus CPUs (0: none).
func setCPU(dir string, v2 bool, cpus float64) error {
	write := func(file, v string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
			return fmt.Errorf("cgroup %s: %w", file, err)
		}
		return nil
	}
	// No ceiling: v1's -1 (v2's max); nor for a number of CPUs beyond
	// any machine's, or NaN.
	quota := "-1"
	if cpus > 0 && cpus < 1<<20 {
		q := max(time.Duration(cpus*float64(cfsPeriod)), minQuota)
		quota = strconv.FormatInt(q.Microseconds(), 10)
	}
	if v2 {
		if quota == "-1" {
			quota = "max"
		}
		if err := write("cpu.weight", strconv.Itoa(cpuWeight)); err != nil {
			return err
		}
		return write("cpu.max", quota+" "+strconv.FormatInt(cfsPeriod.Microseconds(), 10))
	}
	if err := write("cpu.shares", strconv.Itoa(cpuShares)); err != nil {
		return err
	}
	// v1 refuses a quota above the one the worker's own group has (a
	// pod's CPU limit): a ceiling above that bound is none.
	if err := write("cpu.cfs_quota_us", quota); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// remove ends whatever is left in a command's groups and removes them.
// It first lowers the pids group's pids.max to 0, so that nothing left
// can fork while it is being killed: a fork bomb that outlived its
// supervisor would otherwise refill the group as fast as its processes
// are killed. The cpu group, in another hierarchy, holds the same
// processes: it is empty once the pids group is.
func (c *cgroups) remove(g cmdGroups) {
	if g.pids != "" {
		os.WriteFile(filepath.Join(g.pids, "pids.max"), []byte("0"), 0)
	}
	v2 := c.pids != nil && c.pids.v2 || c.cpu != nil && c.cpu.v2
	for _, dir := range g.dirs() {
		if v2 {
			// cgroup.kill (Linux 5.14) kills the whole group at once;
			// where it is missing, the loop below does it.
			os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		}
		for range 500 {
			killCgroup(dir)
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(10 * time.Millisecond) // the kernel is still tearing tasks down
		}
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
