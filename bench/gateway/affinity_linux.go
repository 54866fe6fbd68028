package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// allowedCPUs returns the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading this process's CPUs: %w", err)
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

func cpuSet(cpus ...int) *unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return &set
}

// confine restricts every thread of this process to cpus. A thread made
// later is cloned from one of these and keeps their set, and so does
// every process started from here: the runtime starts a child from the
// goroutine's thread.
func confine(cpus []int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	set := cpuSet(cpus...)
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread that has exited since the listing is no error.
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
	}
	return nil
}

// startOn starts cmd on cpus alone: the calling thread takes that set for
// the moment of the fork, so the child starts with it (every thread it
// makes too), and takes back its own. While the goroutine is locked to
// its thread, a thread the runtime makes meanwhile is cloned from its
// template thread, not from this one.
func startOn(cmd *exec.Cmd, cpus []int) error {
	runtime.LockOSThread()
	var own unix.CPUSet
	if err := unix.SchedGetaffinity(0, &own); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	if err := unix.SchedSetaffinity(0, cpuSet(cpus...)); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &own); rerr != nil {
		// The goroutine stays locked to this thread, so that the runtime
		// runs nothing else on cmd's CPUs; the run stops here.
		if err == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return fmt.Errorf("taking back this thread's CPUs: %w", rerr)
	}
	runtime.UnlockOSThread()
	return err
}
