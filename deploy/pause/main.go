// Command pause is the pod sandbox's process for the cluster that
// scripts/cluster.sh runs: it holds the pod's namespaces open, reaps
// what is left to it and exits on SIGINT or SIGTERM, as the upstream
// pause image's C program does. Built static, it is that image's only
// file, so the cluster needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
