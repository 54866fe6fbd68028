package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
)

// The helper's file descriptors, as the worker passes them.
const (
	fdConfig  = 3 // the helperConfig, as JSON, then EOF
	fdStatus  = 4 // why setting up failed; closed once the command runs
	fdResult  = 5 // the supervisor's helperResult, written as it exits
	fdGoAhead = 6 // closed by the worker once the supervisor is in its cgroup
)

// helperConfig is what the worker tells the helper.
type helperConfig struct {
	// Stage 1 is the supervisor, which starts the command confined; the
	// number lets a later helper tell an older worker's configuration.
	Stage      int      `json:"stage"`
	Policy     Policy   `json:"policy"`
	ReadOnly   []string `json:"read_only"`
	Namespaces bool     `json:"namespaces"`
	// RootDir is an empty directory the supervisor builds the new root
	// in (namespaces only).
	RootDir string `json:"root_dir,omitempty"`
	// Helper is the helper's own path.
	Helper string `json:"helper"`
	// InNamespace says the supervisor built a new root (and network).
	InNamespace bool `json:"in_namespace,omitempty"`
	// Cgroups are the command's cgroups (pids, cpu). The supervisor
	// enters them before it starts anything, unless CgroupByWorker: then
	// the worker moves it in, and closes fdGoAhead when it has.
	Cgroups        []string `json:"cgroups,omitempty"`
	CgroupByWorker bool     `json:"cgroup_by_worker,omitempty"`
	// StatusFD is where the helper says why it could not set up: fdStatus,
	// or 2 (stderr) for a caller that starts the helper itself.
	StatusFD int `json:"status_fd"`
	// Marker is the call's marker (marker_linux.go), set as RLIMIT_RTTIME
	// of every process of the tree; 0 for none.
	Marker uint64 `json:"marker,omitempty"`
}

// helperResult is how the supervisor ended the command.
type helperResult struct {
	Ending   Ending `json:"ending"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
}

// RunHelper runs the helper and exits when the process was started as one
// (os.Args[1] == HelperArg); otherwise it returns at once. Call it first in
// main, before anything starts goroutines of its own, and in TestMain of
// every test binary that sandboxes commands.
func RunHelper() {
	if len(os.Args) < 2 || os.Args[1] != HelperArg {
		return
	}
	if len(os.Args) == 3 && os.Args[2] == "probe" {
		os.Exit(probeMain())
	}
	if len(os.Args) == 3 && os.Args[2] == fingerprintArg {
		fmt.Println(Fingerprint())
		os.Exit(0)
	}
	if len(os.Args) == 3 && os.Args[2] == warmArg {
		rehearse()
		ok, err := receiveCall()
		if err != nil {
			// Nowhere to say it yet: the worker sees the helper end
			// before its command ran.
			os.Exit(125)
		}
		if !ok {
			os.Exit(0)
		}
	}
	// The namespaces and mounts are set up on this thread.
	runtime.LockOSThread()
	cfg, err := readConfig(os.NewFile(fdConfig, "config"))
	statusFD := fdStatus
	if cfg.StatusFD == 2 {
		statusFD = 2
	}
	status := os.NewFile(uintptr(statusFD), "status")
	fail := func(format string, args ...any) {
		fmt.Fprintf(status, format+"\n", args...)
		os.Exit(125)
	}
	if err != nil {
		fail("sandbox: the helper's configuration could not be read")
	}
	if cfg.Stage != 1 {
		fail("sandbox: unknown helper stage %d", cfg.Stage)
	}
	os.Exit(supervise(cfg, status, fail))
}

// readConfig reads the helper's configuration from f and closes it.
func readConfig(f *os.File) (helperConfig, error) {
	var cfg helperConfig
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	if err != nil {
		return cfg, err
	}
	err = json.Unmarshal(b, &cfg)
	return cfg, err
}
