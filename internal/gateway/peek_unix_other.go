//go:build unix && (!linux || 386 || s390x)

package gateway

import "syscall"

// peek reads one byte of fd without taking it and without waiting.
func peek(fd uintptr) (int, error) {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}
