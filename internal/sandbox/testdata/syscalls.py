# Tries each system call the seccomp filter refuses, the way a program
# would, and prints "name errno" for each (0: it worked). A call that
# worked is undone. Run by TestSeccompRefuses, in the sandbox and bare.
import ctypes
import os
import socket
import time

libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(4096)


def sc(*args):
    r = libc.syscall(*[ctypes.c_long(a) for a in args])
    return (0, r) if r >= 0 else (ctypes.get_errno(), r)


def sock(*args):
    try:
        socket.socket(*args).close()
        return 0, 0
    except OSError as e:
        return e.errno, -1


def clone_newuser():
    # clone(CLONE_NEWUSER|SIGCHLD): a child that exits at once.
    err, pid = sc(56, 0x10000000 | 17, 0, 0, 0, 0)
    if err == 0 and pid == 0:
        os._exit(0)
    if err == 0:
        os.waitpid(pid, 0)
    return err, pid


def ptrace():
    # PTRACE_SEIZE of a child of its own, which it does not stop.
    pid = os.fork()
    if pid == 0:
        os.execv("/bin/sleep", ["sleep", "30"])
    r = sc(101, 0x4206, pid, 0, 0)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return r


def unshare():
    # In a child, which the new namespace would then be left to.
    pid = os.fork()
    if pid == 0:
        os._exit(sc(272, 0x10000000)[0])
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), 0


def child():
    # A process of the command's own, in a process group of its own: the
    # calls below act on it by its pid, as they would on the worker's or
    # another conversation's (the filter cannot tell them apart).
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        time.sleep(60)
        os._exit(0)
    return pid


kid = child()
rlim = (ctypes.c_ulong * 2)()
RLIMIT_CORE, RLIMIT_RTTIME = 4, 15


def prlimit_set(pid, res):
    # Read the limit, then set it to what it is: a change of nothing that
    # the sandbox still refuses.
    err, r = sc(302, pid, res, 0, ctypes.addressof(rlim))
    if err:
        return err, r
    return sc(302, pid, res, ctypes.addressof(rlim), 0)


def setrlimit_marker():
    sc(97, RLIMIT_RTTIME, ctypes.addressof(rlim))  # getrlimit
    return sc(160, RLIMIT_RTTIME, ctypes.addressof(rlim))


param = ctypes.c_int(0)
mask = (ctypes.c_ulong * 16)()
# struct sched_attr, SCHED_ATTR_SIZE_VER0: size, policy, flags, nice, …
attr = (ctypes.c_uint32 * 12)(48, 0, 0, 0, 19)


def affinity(pid):
    err, r = sc(204, pid, ctypes.sizeof(mask), ctypes.addressof(mask))
    if err:
        return err, r
    return sc(203, pid, ctypes.sizeof(mask), ctypes.addressof(mask))


def ipc(get, rm):
    err, ident = get()
    if err == 0:
        rm(ident)
    return err, ident


mqname = ctypes.create_string_buffer(b"/talkide-syscalls-%d" % os.getpid())


def mq_open():
    err, fd = sc(240, ctypes.addressof(mqname), 0o100 | 2, 0o600, 0)
    if err == 0:
        os.close(fd)
        sc(241, ctypes.addressof(mqname))
    return err, fd


calls = {
    "io_uring_setup": lambda: sc(425, 1, ctypes.addressof(buf)),
    "ptrace": ptrace,
    "process_vm_readv": lambda: sc(310, os.getpid(), 0, 0, 0, 0, 0),
    "socket AF_NETLINK": lambda: sock(16, socket.SOCK_RAW, 0),
    "socket AF_VSOCK": lambda: sock(40, socket.SOCK_STREAM, 0),
    "socket AF_PACKET": lambda: sock(17, socket.SOCK_RAW, 0),
    "socket raw ICMP": lambda: sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    "socket UDP": lambda: sock(socket.AF_INET, socket.SOCK_DGRAM, 0),
    "socket UDP6": lambda: sock(socket.AF_INET6, socket.SOCK_DGRAM, 0),
    "socket AF_UNIX": lambda: sock(socket.AF_UNIX, socket.SOCK_STREAM, 0),
    "socket MPTCP": lambda: sock(socket.AF_INET, socket.SOCK_STREAM, 262),
    "unshare CLONE_NEWUSER": unshare,
    "clone CLONE_NEWUSER": clone_newuser,
    "clone3": lambda: sc(435, ctypes.addressof(buf), 0),  # size 0: EINVAL where it is let through
    "userfaultfd": lambda: sc(323, 1),  # UFFD_USER_MODE_ONLY
    "keyctl": lambda: sc(250, 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "mount": lambda: sc(165, 0, ctypes.addressof(buf), 0, 0, 0),
    "kcmp": lambda: sc(312, os.getpid(), kid, 0, 0, 0),  # KCMP_FILE, fd 0 of each
    # Another process's limits, priorities and CPUs: refused by pid.
    "prlimit64 another process": lambda: prlimit_set(kid, RLIMIT_CORE),
    "setpriority another process": lambda: sc(141, 0, kid, 19),  # PRIO_PROCESS
    "setpriority a process group": lambda: sc(141, 1, kid, 19),  # PRIO_PGRP
    "ioprio_set another process": lambda: sc(251, 1, kid, (2 << 13) | 4),  # IOPRIO_WHO_PROCESS, best effort 4
    "sched_setaffinity another process": lambda: affinity(kid),
    "sched_setscheduler another process": lambda: sc(144, kid, 3, ctypes.addressof(param)),  # SCHED_BATCH
    "sched_setparam another process": lambda: sc(142, kid, ctypes.addressof(param)),
    "sched_setattr another process": lambda: sc(314, kid, ctypes.addressof(attr), 0),
    # The call marker, the caller's own RLIMIT_RTTIME, by both calls.
    "prlimit64 the marker": lambda: prlimit_set(0, RLIMIT_RTTIME),
    "setrlimit the marker": setrlimit_marker,
    # System V IPC and POSIX message queues: refused in the first layer
    # alone, the command's own with namespaces.
    "ipc shmget": lambda: ipc(lambda: sc(29, 0, 4096, 0o600), lambda i: sc(31, i, 0, 0)),
    "ipc msgget": lambda: ipc(lambda: sc(68, 0, 0o600), lambda i: sc(71, i, 0, 0)),
    "ipc semget": lambda: ipc(lambda: sc(64, 0, 1, 0o600), lambda i: sc(66, i, 0, 0)),
    "ipc mq_open": mq_open,
    # What a process does to itself stays allowed everywhere.
    "ok prlimit64 itself": lambda: prlimit_set(0, RLIMIT_CORE),
    "ok prlimit64 read another": lambda: sc(302, kid, RLIMIT_CORE, 0, ctypes.addressof(rlim)),
    "ok sched_setaffinity itself": lambda: affinity(0),
    "ok setpriority itself": lambda: sc(141, 0, 0, 19),
}
for name, call in calls.items():
    print("%s %d" % (name, call()[0]), flush=True)
os.kill(kid, 9)
os.waitpid(kid, 0)
# Last: a system call of the x32 ABI kills the process in the sandbox.
print("x32 %d" % sc(0x40000000 | 39)[0], flush=True)
