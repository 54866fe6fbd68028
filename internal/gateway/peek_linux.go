//go:build linux && !386 && !s390x

package gateway

import (
	"syscall"
	"unsafe"
)

// peek reads one byte of fd without taking it and without waiting. It is
// a raw system call, as internal/rawio's reads are and for their reason:
// one that cannot block need not tell the scheduler it might, which woke
// the runtime's monitor thread on every call that took a pooled upstream
// connection. (Not on 386 and s390x, where the syscall package reaches
// recvfrom through socketcall.)
func peek(fd uintptr) (int, error) {
	var b [1]byte
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
