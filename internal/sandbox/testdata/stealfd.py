# Tries to take file descriptor 3 of process argv[1] with pidfd_getfd:
# prints "getfd <errno>", 0 when it got it.
import ctypes
import sys

libc = ctypes.CDLL(None, use_errno=True)
SYS_pidfd_open, SYS_pidfd_getfd = 434, 438
pidfd = libc.syscall(SYS_pidfd_open, int(sys.argv[1]), 0)
if pidfd < 0:
    print("pidfd_open", ctypes.get_errno())
    sys.exit(0)
fd = libc.syscall(SYS_pidfd_getfd, pidfd, 3, 0)
print("getfd", 0 if fd >= 0 else ctypes.get_errno())
