# Tries each system call the seccomp filter refuses, the way a program
# would, and prints "name errno" for each (0: it worked). A call that
# worked is undone. Run by TestSeccompRefuses, in the sandbox and bare.
import ctypes
import os
import socket

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
}
for name, call in calls.items():
    print("%s %d" % (name, call()[0]), flush=True)
# Last: a system call of the x32 ABI kills the process in the sandbox.
print("x32 %d" % sc(0x40000000 | 39)[0], flush=True)
