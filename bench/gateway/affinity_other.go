//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

var errAffinity = errors.New("-upstream-cpu, -proxy-cpu: CPU affinity is set only on Linux")

func allowedCPUs() ([]int, error)             { return nil, errAffinity }
func confine([]int) error                     { return errAffinity }
func startOn(cmd *exec.Cmd, cpus []int) error { return errAffinity }
