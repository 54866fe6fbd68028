package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter closes what Landlock (up to ABI 7) does not: sockets
// other than TCP over IPv4 and IPv6 (UDP, raw and packet sockets, netlink,
// vsock, and unix sockets, through which a pathname socket of the host
// would be reachable; socketpair stays), io_uring (whose operations
// bypass the syscall filter), ptrace and the process_vm calls, new
// namespaces, mounts, and kernel facilities a build never needs (BPF,
// perf, keyrings, userfaultfd, modules, kexec). A refused call fails with
// EPERM, so that programs report it rather than crash; clone3 fails with
// ENOSYS, which makes the C library fall back to clone, whose flags the
// filter can read. A system call of another architecture kills the
// process: it would be a way around the numbers below.

// seccompData offsets (struct seccomp_data).
const (
	offNR   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian
	offArg1 = 24
	offArg2 = 32
)

// Return values.
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
)

// deniedSyscalls fail with EPERM whatever their arguments.
var deniedSyscalls = []uintptr{
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT, unix.SYS_ACCT,
	unix.SYS_LANDLOCK_CREATE_RULESET, // a nested domain is harmless, but nothing here needs one
}

// namespaceFlags are the clone flags that create namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// seccompProgram builds the filter.
func seccompProgram() []unix.SockFilter {
	var p bpfProgram
	p.load(offArch)
	p.jumpIf(unix.AUDIT_ARCH_X86_64, 1, 0)
	p.ret(retKill)
	p.load(offNR)
	// The x32 ABI shares the architecture and sets this bit.
	p.jumpGE(0x40000000, 0, 1)
	p.ret(retKill)
	for _, nr := range deniedSyscalls {
		p.jumpIf(uint32(nr), 0, 1)
		p.ret(retEPERM)
	}
	p.jumpIf(unix.SYS_CLONE3, 0, 1)
	p.ret(retENOSYS)
	// clone(flags, …): no namespace flags.
	p.jumpIf(unix.SYS_CLONE, 0, 4)
	p.load(offArg0)
	p.jumpSet(namespaceFlags, 0, 1)
	p.ret(retEPERM)
	p.ret(retAllow)
	// socket(domain, type, protocol): TCP over IPv4 or IPv6 only. (The
	// nr is still loaded when the clone branch was not taken.) The
	// protocol must be TCP too: SCTP and MPTCP also come as SOCK_STREAM,
	// and Landlock's port rules are TCP's.
	p.jumpIf(unix.SYS_SOCKET, 0, 11) // → the final allow
	p.load(offArg0)
	p.jumpIf(unix.AF_INET, 1, 0)
	p.jumpIf(unix.AF_INET6, 0, 6) // → EPERM
	p.load(offArg1)
	p.and(0xf)                       // the type, without SOCK_NONBLOCK and SOCK_CLOEXEC
	p.jumpIf(unix.SOCK_STREAM, 0, 3) // → EPERM
	p.load(offArg2)
	p.jumpIf(0, 2, 0)                // → allow
	p.jumpIf(unix.IPPROTO_TCP, 1, 0) // → allow
	p.ret(retEPERM)
	p.ret(retAllow)
	p.ret(retAllow)
	return p.instrs
}

// bpfProgram assembles classic BPF for seccomp.
type bpfProgram struct{ instrs []unix.SockFilter }

func (p *bpfProgram) add(code uint16, jt, jf uint8, k uint32) {
	p.instrs = append(p.instrs, unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k})
}
func (p *bpfProgram) load(off uint32) { p.add(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, 0, 0, off) }
func (p *bpfProgram) ret(v uint32)    { p.add(unix.BPF_RET|unix.BPF_K, 0, 0, v) }
func (p *bpfProgram) and(v uint32)    { p.add(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, 0, 0, v) }
func (p *bpfProgram) jumpIf(v uint32, jt, jf uint8) {
	p.add(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, jt, jf, v)
}
func (p *bpfProgram) jumpGE(v uint32, jt, jf uint8) {
	p.add(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, jt, jf, v)
}
func (p *bpfProgram) jumpSet(v uint32, jt, jf uint8) {
	p.add(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, jt, jf, v)
}

// seccomp installs the filter on the calling thread; no_new_privs must be
// set.
func seccomp() error {
	prog := seccompProgram()
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
