package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter closes what Landlock (up to ABI 7) does not:
//
//   - sockets other than TCP over IPv4 and IPv6 (UDP, raw and packet
//     sockets, netlink, vsock, and unix sockets, through which a pathname
//     socket of the host would be reachable; socketpair stays), io_uring
//     (whose operations bypass the syscall filter), ptrace, kcmp and the
//     process_vm calls, new namespaces, mounts, and kernel facilities a
//     build never needs (BPF, perf, keyrings, userfaultfd, modules, kexec);
//   - the calls that act on another process by its pid and that Landlock's
//     scopes do not cover, because the kernel checks only that both run as
//     the same user: prlimit64 may change only the caller's own limits
//     (reading another's stays, as /proc shows them anyway), setpriority,
//     ioprio_set and the sched_set* calls may name only the caller (pid 0).
//     Without this a command could set the worker's RLIMIT_CPU to one
//     second, another conversation's command's nice value to 19, or the
//     waiting helper's address space to 64 KiB. A program that names
//     itself by its own pid, or a thread of its own by its tid, is refused
//     too: the filter sees numbers, not whose they are;
//   - the call marker (RLIMIT_RTTIME, see callMarker), which no process of
//     the tree may change, so that the worker can always find the tree;
//   - in the first layer only, System V IPC and POSIX message queues: all
//     conversations' commands run as one user, to whom every segment,
//     semaphore and queue of another conversation is its owner's, and a
//     segment outlives the call that made it. (With namespaces the IPC
//     namespace is the command's own.)
//
// A refused call fails with EPERM, so that programs report it rather than
// crash; clone3 fails with ENOSYS, which makes the C library fall back to
// clone, whose flags the filter can read. A system call of another
// architecture kills the process: it would be a way around the numbers
// below.

// seccompData offsets (struct seccomp_data); an argument's low 32 bits
// come first on little-endian.
const (
	offNR   = 0
	offArch = 4
	offArg0 = 16
)

// argLow and argHigh are the offsets of the halves of argument i.
func argLow(i int) uint32  { return uint32(offArg0 + 8*i) }
func argHigh(i int) uint32 { return uint32(offArg0 + 8*i + 4) }

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
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_KCMP,
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

// sharedIPCSyscalls are denied in the first layer alone, where the IPC
// objects they reach are every conversation's.
var sharedIPCSyscalls = []uintptr{
	unix.SYS_SHMGET, unix.SYS_SHMAT, unix.SYS_SHMCTL,
	unix.SYS_SEMGET, unix.SYS_SEMOP, unix.SYS_SEMTIMEDOP, unix.SYS_SEMCTL,
	unix.SYS_MSGGET, unix.SYS_MSGSND, unix.SYS_MSGRCV, unix.SYS_MSGCTL,
	unix.SYS_MQ_OPEN, unix.SYS_MQ_UNLINK, unix.SYS_MQ_TIMEDSEND, unix.SYS_MQ_TIMEDRECEIVE, unix.SYS_MQ_NOTIFY, unix.SYS_MQ_GETSETATTR,
}

// selfOnlySyscalls act on the process their first argument names; only 0,
// the caller, is allowed.
var selfOnlySyscalls = []uintptr{
	unix.SYS_SCHED_SETAFFINITY, unix.SYS_SCHED_SETSCHEDULER, unix.SYS_SCHED_SETPARAM, unix.SYS_SCHED_SETATTR,
}

// namespaceFlags are the clone flags that create namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// ioprioWhoProcess is IOPRIO_WHO_PROCESS (linux/ioprio.h).
const ioprioWhoProcess = 1

// seccompProgram builds the filter; firstLayer adds what only the first
// layer alone needs.
func seccompProgram(firstLayer bool) ([]unix.SockFilter, error) {
	var p bpfProgram
	p.load(offArch)
	p.jumpIf(unix.AUDIT_ARCH_X86_64, "", "kill")
	p.load(offNR)
	// The x32 ABI shares the architecture and sets this bit.
	p.jumpGE(0x40000000, "kill", "")
	denied := deniedSyscalls
	if firstLayer {
		denied = append(append([]uintptr(nil), denied...), sharedIPCSyscalls...)
	}
	for _, nr := range denied {
		p.jumpIf(uint32(nr), "eperm", "")
	}
	p.jumpIf(unix.SYS_CLONE3, "enosys", "")
	p.jumpIf(unix.SYS_CLONE, "clone", "")
	p.jumpIf(unix.SYS_SOCKET, "socket", "")
	p.jumpIf(unix.SYS_PRLIMIT64, "prlimit", "")
	p.jumpIf(unix.SYS_SETRLIMIT, "setrlimit", "")
	p.jumpIf(unix.SYS_SETPRIORITY, "setpriority", "")
	p.jumpIf(unix.SYS_IOPRIO_SET, "ioprio", "")
	for _, nr := range selfOnlySyscalls {
		p.jumpIf(uint32(nr), "self", "")
	}
	p.ret(retAllow)

	// clone(flags, …): no namespace flags.
	p.label("clone")
	p.load(argLow(0))
	p.jumpSet(namespaceFlags, "eperm", "allow")

	// socket(domain, type, protocol): TCP over IPv4 or IPv6 only. The
	// protocol must be TCP too: SCTP and MPTCP also come as SOCK_STREAM,
	// and Landlock's port rules are TCP's.
	p.label("socket")
	p.load(argLow(0))
	p.jumpIf(unix.AF_INET, "socket-type", "")
	p.jumpIf(unix.AF_INET6, "socket-type", "eperm")
	p.label("socket-type")
	p.load(argLow(1))
	p.and(0xf) // the type, without SOCK_NONBLOCK and SOCK_CLOEXEC
	p.jumpIf(unix.SOCK_STREAM, "", "eperm")
	p.load(argLow(2))
	p.jumpIf(0, "allow", "")
	p.jumpIf(unix.IPPROTO_TCP, "allow", "eperm")

	// prlimit64(pid, resource, new, old): another process's limits may be
	// read, not changed; the caller's may be changed, but for the marker.
	// (pid_t and the resource are 32-bit: the kernel reads the low half.)
	p.label("prlimit")
	p.load(argLow(0))
	p.jumpIf(0, "", "read-only")
	p.load(argLow(1))
	p.jumpIf(unix.RLIMIT_RTTIME, "read-only", "allow")
	p.label("read-only") // new (a pointer, both halves) must be NULL
	p.load(argLow(2))
	p.jumpIf(0, "", "eperm")
	p.load(argHigh(2))
	p.jumpIf(0, "allow", "eperm")

	// setrlimit(resource, rlim): the caller's own, but for the marker.
	p.label("setrlimit")
	p.load(argLow(0))
	p.jumpIf(unix.RLIMIT_RTTIME, "eperm", "allow")

	// setpriority(which, who, prio) and ioprio_set(which, who, prio): a
	// process, and that process the caller. (PRIO_USER would reach every
	// process of the user, the worker's too; PRIO_PGRP a group the
	// command may have joined to the supervisor's.)
	p.label("setpriority")
	p.load(argLow(0))
	p.jumpIf(unix.PRIO_PROCESS, "who", "eperm")
	p.label("ioprio")
	p.load(argLow(0))
	p.jumpIf(ioprioWhoProcess, "who", "eperm")
	p.label("who")
	p.load(argLow(1))
	p.jumpIf(0, "allow", "eperm")

	// sched_set*(pid, …): the caller.
	p.label("self")
	p.load(argLow(0))
	p.jumpIf(0, "allow", "eperm")

	p.label("allow")
	p.ret(retAllow)
	p.label("eperm")
	p.ret(retEPERM)
	p.label("enosys")
	p.ret(retENOSYS)
	p.label("kill")
	p.ret(retKill)
	return p.assemble()
}

// bpfProgram assembles classic BPF for seccomp. Conditional jumps name
// their targets by label ("" is the next instruction); assemble resolves
// them, and fails on a jump backwards or beyond a conditional jump's 255
// instructions.
type bpfProgram struct {
	instrs []unix.SockFilter
	jumps  []bpfJump
	labels map[string]int
}

type bpfJump struct {
	at     int
	jt, jf string
}

func (p *bpfProgram) add(code uint16, k uint32) {
	p.instrs = append(p.instrs, unix.SockFilter{Code: code, K: k})
}
func (p *bpfProgram) load(off uint32) { p.add(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
func (p *bpfProgram) ret(v uint32)    { p.add(unix.BPF_RET|unix.BPF_K, v) }
func (p *bpfProgram) and(v uint32)    { p.add(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, v) }
func (p *bpfProgram) jump(op uint16, v uint32, jt, jf string) {
	p.jumps = append(p.jumps, bpfJump{at: len(p.instrs), jt: jt, jf: jf})
	p.add(unix.BPF_JMP|op|unix.BPF_K, v)
}
func (p *bpfProgram) jumpIf(v uint32, jt, jf string)  { p.jump(unix.BPF_JEQ, v, jt, jf) }
func (p *bpfProgram) jumpGE(v uint32, jt, jf string)  { p.jump(unix.BPF_JGE, v, jt, jf) }
func (p *bpfProgram) jumpSet(v uint32, jt, jf string) { p.jump(unix.BPF_JSET, v, jt, jf) }

func (p *bpfProgram) label(name string) {
	if p.labels == nil {
		p.labels = map[string]int{}
	}
	p.labels[name] = len(p.instrs)
}

func (p *bpfProgram) assemble() ([]unix.SockFilter, error) {
	offset := func(at int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := p.labels[label]
		if !ok {
			return 0, fmt.Errorf("seccomp: no label %q", label)
		}
		d := to - at - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("seccomp: a jump of %d to %q", d, label)
		}
		return uint8(d), nil
	}
	for _, j := range p.jumps {
		var err error
		if p.instrs[j.at].Jt, err = offset(j.at, j.jt); err != nil {
			return nil, err
		}
		if p.instrs[j.at].Jf, err = offset(j.at, j.jf); err != nil {
			return nil, err
		}
	}
	return p.instrs, nil
}

// seccomp installs the filter on the calling thread; no_new_privs must be
// set.
func seccomp(firstLayer bool) error {
	prog, err := seccompProgram(firstLayer)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
