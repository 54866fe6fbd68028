package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talkide/platform/internal/proctest"
	"github.com/talkide/platform/internal/roles"
	"github.com/talkide/platform/internal/syncbuf"
)

// The first layer alone, as a restricted Kubernetes pod gives it: the
// real talkide binary, with talkide-sandbox beside it as in the worker's
// image, run as an unprivileged user with no capabilities, no pids cgroup
// it may write and no user namespaces used (--sandbox landlock), and
// started with a descriptor it never asked for (9<secret). The attacks
// come from conversation A's Bash and Read, against the worker itself,
// against conversation B's running command and against the helper
// waiting for the next command. Each runs once with --sandbox none too,
// in a harmless form of the same system call, where it must work: none
// is refused for a reason of its own.

// unprivilegedUID is who the worker runs as when the tests run as root.
const unprivilegedUID = 65534

// unprivilegedDev is a talkide dev process run as production runs the
// worker.
type unprivilegedDev struct {
	dir    string // the binaries, the secret, the data
	bin    string
	secret string
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	info   roles.DevInfo
	a, b   string // conversation ids
}

// startUnprivilegedDev builds talkide and talkide-sandbox into one
// directory and starts talkide dev in mode, as unprivilegedUID when the
// tests run as root (as the tests' own user otherwise), with fd 9 open on
// a file of the tests' that the worker's user may not read.
func startUnprivilegedDev(t *testing.T, mode string) *unprivilegedDev {
	t.Helper()
	dir, err := os.MkdirTemp("", "talkide-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	d := &unprivilegedDev{dir: dir, bin: linkedBinary(t, dir), secret: filepath.Join(dir, "secret"), stderr: &syncbuf.Buffer{}}
	goBuild(t, filepath.Join(dir, "talkide-sandbox"), "../talkide-sandbox", "CGO_ENABLED=0")
	if err := os.WriteFile(d.secret, []byte("the inherited secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{d.bin, "dev", "--sandbox", mode, "--data-dir", data, "--addr", "127.0.0.1:0"}
	if os.Getuid() == 0 {
		if err := os.Chown(data, unprivilegedUID, unprivilegedUID); err != nil {
			t.Fatal(err)
		}
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Fatalf("setpriv (util-linux) is needed to run the worker unprivileged: %v", err)
		}
		uid := strconv.Itoa(unprivilegedUID)
		args = append([]string{setpriv, "--reuid=" + uid, "--regid=" + uid, "--clear-groups",
			"--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"}, args...)
	}
	secret, err := os.Open(d.secret)
	if err != nil {
		t.Fatal(err)
	}
	defer secret.Close()
	d.cmd = exec.Command(args[0], args[1:]...)
	d.cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + data, "LANG=C.UTF-8"}
	d.cmd.Stdout, d.cmd.Stderr = d.stderr, d.stderr
	d.cmd.ExtraFiles = []*os.File{nil, nil, nil, nil, nil, nil, secret} // fd 9
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			d.cmd.Process.Kill()
			<-done
		}
	})
	d.info = waitDevJSON(t, data, d.stderr.String)
	if mode != "none" && !strings.Contains(d.stderr.String(), "talkide-sandbox") {
		t.Errorf("the worker does not use the talkide-sandbox beside it:\n%s", d.stderr.String())
	}
	d.a, d.b = createConversation(t, d.info.ControlPlane).ID, createConversation(t, d.info.ControlPlane).ID
	return d
}

func (d *unprivilegedDev) bash(t *testing.T, conv, command string) (string, bool) {
	t.Helper()
	res := bashIn(t, d.info.ControlPlane, conv, command)
	return res.Output, res.IsError
}

// worker is the pid of the process that runs the worker: setpriv
// executes talkide in its own place.
func (d *unprivilegedDev) worker() int { return d.cmd.Process.Pid }

// limit returns the soft and hard value of one limit of pid, as
// /proc/<pid>/limits shows it ("Max cpu time").
func limit(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, name); ok {
			f := strings.Fields(rest)
			if len(f) >= 2 {
				return f[0] + ":" + f[1]
			}
		}
	}
	t.Fatalf("no %q in the limits of %d", name, pid)
	return ""
}

// waitingHelpers returns the pids of the helpers waiting for a command.
func waitingHelpers(bin string) []int {
	return proctest.Pids(func(pid int) bool {
		return proctest.Cmdline(pid) == proctest.Args(bin+"-sandbox", "__talkide_sandbox", "warm")
	})
}

// runningSleep starts conv's command "sleep secs; echo …", and returns
// the sleep's pid and a channel that gets the command's result once the
// test kills the sleep.
func (d *unprivilegedDev) runningSleep(t *testing.T, conv string, secs int) (int, <-chan string) {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		out, isErr := d.bash(t, conv, fmt.Sprintf("sleep %d; echo B survived", secs))
		done <- fmt.Sprintf("%v %s", isErr, out)
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) { // polling for another process's child
		if pids := sleepers(strconv.Itoa(secs)); len(pids) > 0 {
			return pids[0], done
		}
		if time.Now().After(deadline) {
			t.Fatal("B's sleep never started")
		}
	}
}

// TestFirstLayerAloneUnprivileged performs each attack against the first
// layer as production has it.
func TestFirstLayerAloneUnprivileged(t *testing.T) {
	d := startUnprivilegedDev(t, "landlock")
	w := strconv.Itoa(d.worker())
	if !strings.Contains(d.stderr.String(), `layers="[env landlock seccomp]"`) {
		t.Fatalf("the worker does not give the first layer alone:\n%s", d.stderr.String())
	}
	workerLimits := map[string]string{}
	for _, l := range []string{"Max cpu time", "Max open files", "Max address space"} {
		workerLimits[l] = limit(t, d.worker(), l)
	}

	if target, err := os.Readlink("/proc/" + w + "/fd/9"); err != nil || target != d.secret {
		t.Fatalf("the worker's fd 9: %q, %v; want %s", target, err, d.secret)
	}
	secs := 700 + os.Getpid()%90
	sleep, bDone := d.runningSleep(t, d.b, secs)
	s := strconv.Itoa(sleep)
	helpers := waitingHelpers(d.bin)
	if len(helpers) == 0 {
		t.Fatal("no helper waits for the next command")
	}
	h := strconv.Itoa(helpers[0])
	sleepCPU := limit(t, sleep, "Max cpu time")

	refused := map[string]string{
		// Limits of other processes of the same user.
		"the worker's CPU limit":          "prlimit --pid " + w + " --cpu=1:1",
		"the worker's descriptors":        "prlimit --pid " + w + " --nofile=16:16",
		"B's command's CPU limit":         "prlimit --pid " + s + " --cpu=1:1",
		"the waiting helper's memory":     "prlimit --pid " + h + " --as=65536:65536",
		"its own supervisor's memory":     "prlimit --pid $PPID --as=65536:65536",
		"the worker's nice value":         "renice -n 19 -p " + w,
		"B's command's nice value":        "renice -n 19 -p " + s,
		"B's command's CPUs":              "taskset -p 1 " + s,
		"the worker's CPUs":               "taskset -p 1 " + w,
		"B's command's I/O priority":      "ionice -c 3 -p " + s,
		"the worker's I/O priority":       "ionice -c 3 -p " + w,
		"B's command's scheduling policy": "chrt -i -p 0 " + s,
		// What the worker inherited, and what the host keeps.
		"the descriptor the worker inherited": "cat <&9",
		"the inherited file by name":          "cat " + d.secret,
		"a System V segment":                  "ipcmk -M 4096",
	}
	for what, cmd := range refused {
		out, isErr := d.bash(t, d.a, "set -o pipefail; "+cmd)
		if !isErr || strings.Contains(out, "inherited secret") {
			t.Errorf("%s: %q was not refused: %s", what, cmd, out)
		}
	}

	// A process that left the session, started beside the attack on the
	// supervisor, is gone with the call.
	marker := strconv.Itoa(800 + os.Getpid()%90)
	if out, _ := d.bash(t, d.a, "setsid sleep "+marker+" & (sleep "+marker+" &); prlimit --pid $PPID --as=65536:65536; echo started"); !strings.Contains(out, "started") {
		t.Fatalf("the background start: %s", out)
	}
	if pids := sleepers(marker); len(pids) > 0 {
		t.Errorf("background sleeps outlived their call: %v", pids)
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}

	// The file tools never say where a symlink leads inside the worker.
	if out, isErr := d.bash(t, d.a, "ln -s /proc/self/fd/9 leak9 && ln -s /proc/self/exe leakexe && ln -s /proc/self/fd/3 leak3 && ln -s "+d.info.ClaudeConfigDir+" leakdata"); isErr {
		t.Fatalf("planting the links: %s", out)
	}
	for _, link := range []string{"leak9", "leakexe", "leak3", "leakdata"} {
		res := toolCall(t, d.info.ControlPlane, d.a, `[[tool:Read {"file_path":"`+link+`"}]]`)
		if !res.IsError || !strings.Contains(res.Output, link) {
			t.Errorf("Read %s: %+v", link, res)
		}
		for _, leak := range []string{"/proc", d.dir, "controlplane.db", "secret", "talkide"} {
			if strings.Contains(res.Output, leak) {
				t.Errorf("Read %s says %q: %s", link, leak, res.Output)
			}
		}
	}

	// Nothing of it took: the worker's limits, B's command's, B's
	// command itself, and the next command B runs in a waiting helper.
	for l, v := range workerLimits {
		if got := limit(t, d.worker(), l); got != v {
			t.Errorf("the worker's %s: %s, was %s", l, got, v)
		}
	}
	if got := limit(t, sleep, "Max cpu time"); got != sleepCPU {
		t.Errorf("B's command's CPU limit: %s, was %s", got, sleepCPU)
	}
	syscall.Kill(sleep, syscall.SIGKILL) // B's command goes on
	if got := <-bDone; !strings.HasPrefix(got, "false ") || !strings.HasSuffix(got, "B survived\n") {
		t.Errorf("B's command: %q", got)
	}
	if out, isErr := d.bash(t, d.b, "echo B again"); isErr || out != "B again\n" {
		t.Errorf("B's next command: %v %q", isErr, out)
	}
	resp, err := http.Get(d.info.Worker + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the worker is not healthy: %v %v\n%s", resp, err, d.stderr.String())
	}
	resp.Body.Close()
}

// TestFirstLayerAttacksWorkBare runs each attack of
// TestFirstLayerAloneUnprivileged with --sandbox none, in a form that
// changes nothing (a limit set to what it is, a nice value to its own),
// and checks that it then works: the same system call, refused above by
// the sandbox alone.
func TestFirstLayerAttacksWorkBare(t *testing.T) {
	d := startUnprivilegedDev(t, "none")
	w := strconv.Itoa(d.worker())
	secs := 700 + os.Getpid()%90
	sleep, bDone := d.runningSleep(t, d.b, secs)
	s := strconv.Itoa(sleep)
	same := func(pid int, name, flag string) string {
		return fmt.Sprintf("prlimit --pid %d --%s=%s", pid, flag, limit(t, pid, name))
	}
	works := map[string]string{
		"the worker's CPU limit":          same(d.worker(), "Max cpu time", "cpu"),
		"the worker's descriptors":        same(d.worker(), "Max open files", "nofile"),
		"B's command's CPU limit":         same(sleep, "Max cpu time", "cpu"),
		"the worker's nice value":         "renice -n 0 -p " + w,
		"B's command's CPUs":              "taskset -p $(taskset -p " + s + " | sed 's/.*: //') " + s,
		"B's command's I/O priority":      "ionice -c 2 -n 4 -p " + s,
		"B's command's scheduling policy": "chrt -o -p 0 " + s,
		"a System V segment":              "ipcrm -m $(ipcmk -M 4096 | sed 's/.*: //')",
	}
	for what, cmd := range works {
		out, isErr := d.bash(t, d.a, "set -o pipefail; "+cmd)
		if isErr {
			t.Errorf("%s: %q did not work without a sandbox: %s", what, cmd, out)
		}
	}
	// The worker holds the descriptor, but marked it close-on-exec as it
	// started: without a sandbox too, no command gets it.
	if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/9", d.worker())); err != nil || target != d.secret {
		t.Errorf("the worker's fd 9: %q, %v; want %s", target, err, d.secret)
	}
	if out, isErr := d.bash(t, d.a, "cat <&9"); !isErr || strings.Contains(out, "inherited secret") {
		t.Errorf("a bare command read the worker's fd 9: %s", out)
	}
	syscall.Kill(sleep, syscall.SIGKILL)
	<-bDone
}
