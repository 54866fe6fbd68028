package sandbox

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// setNamespaces makes the helper start in new user, mount, PID, network
// and IPC namespaces, as root of the user namespace, which is the worker's
// own user outside it.
func setNamespaces(a *syscall.SysProcAttr) {
	a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	a.GidMappingsEnableSetgroups = false
}

// probeMain checks, in the namespaces the probe was started in, that a
// mount can be made there: a kernel may allow user namespaces and still
// refuse mounts in them.
func probeMain() int {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Println("mount namespace:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "talkide-probe-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.Remove(dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4k"); err != nil {
		fmt.Println("tmpfs:", err)
		return 1
	}
	unix.Unmount(dir, unix.MNT_DETACH)
	return 0
}

// socketDir is where the proxies' unix sockets appear in the new root:
// only the supervisor uses them (the command's seccomp filter refuses unix
// sockets, and Landlock grants nothing there).
const socketDir = "/run/talkide-proxies"

// buildRoot makes the namespace's root the sandbox's view of the world,
// and returns the proxies' sockets as they are found in it: a tmpfs
// holding, read-only, the allow-list, and, writable, the workspace and the
// other writable directories, each at its own path (so that paths in the
// conversation mean the same inside and out); the parents of those paths
// are empty directories, so another conversation's workspace is not even
// listed. Then /dev with the usual devices, a fresh /proc for the PID
// namespace, a private /tmp and /dev/shm. pivot_root leaves nothing of the
// old root beneath, so there is nothing to unmount one's way back to.
func buildRoot(cfg helperConfig) (map[int]string, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("private mounts: %w", err)
	}
	root := cfg.RootDir
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		return nil, fmt.Errorf("root tmpfs: %w", err)
	}
	// A private /tmp and /dev/shm first: what is bound below may live
	// under /tmp, and must stay visible on top of them.
	for _, dir := range []string{"dev/shm", "tmp"} {
		d := filepath.Join(root, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
			return nil, fmt.Errorf("%s tmpfs: %w", dir, err)
		}
	}
	p := cfg.Policy
	for _, path := range mountPoints(append(append([]string(nil), cfg.ReadOnly...), p.ReadOnly...)) {
		if err := bindInto(root, path, true); err != nil {
			return nil, err
		}
	}
	// Devices: the host's own nodes, bound one by one (a user namespace
	// cannot make device nodes).
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return nil, err
	}
	for _, d := range append(append([]string(nil), devices...), "/dev/tty") {
		if err := bindInto(root, d, false); err != nil && d != "/dev/tty" {
			return nil, err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(root, "dev", name)); err != nil {
			return nil, err
		}
	}
	for _, path := range append([]string{p.Workspace}, p.Writable...) {
		if err := bindInto(root, path, false); err != nil {
			return nil, err
		}
	}
	proc := filepath.Join(root, "proc")
	if err := os.MkdirAll(proc, 0o555); err != nil {
		return nil, err
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("proc: %w", err)
	}
	sockets := map[int]string{}
	if len(p.Ports) > 0 {
		d := filepath.Join(root, socketDir)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		for _, port := range p.Ports {
			src := p.Sockets[port]
			dst := filepath.Join(d, strconv.Itoa(port))
			if err := os.WriteFile(dst, nil, 0o600); err != nil {
				return nil, err
			}
			if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
				return nil, fmt.Errorf("proxy socket %s: %w", src, err)
			}
			sockets[port] = filepath.Join(socketDir, strconv.Itoa(port))
		}
	}
	old := filepath.Join(root, ".old-root")
	if err := os.Mkdir(old, 0o700); err != nil {
		return nil, err
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return nil, fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return nil, err
	}
	if err := unix.Unmount("/.old-root", unix.MNT_DETACH); err != nil {
		return nil, fmt.Errorf("detach the old root: %w", err)
	}
	if err := os.Remove("/.old-root"); err != nil {
		return nil, err
	}
	// The root itself is read-only: the command writes only where it may.
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return nil, fmt.Errorf("read-only root: %w", err)
	}
	return sockets, nil
}

// mountPoints returns what to bind for the read-only paths: the entries
// of /etc as /etc itself, once. Landlock, applied in this layer too,
// grants no more of it than the entries; a bind mount apiece would cost
// the command a mount for each of dozens of files.
func mountPoints(paths []string) []string {
	out := make([]string, 0, len(paths))
	etc := false
	for _, p := range paths {
		if p == "/etc" || strings.HasPrefix(p, "/etc/") {
			if !etc {
				out = append(out, "/etc")
			}
			etc = true
			continue
		}
		out = append(out, p)
	}
	return out
}

// bindInto binds path of the host to the same path under root: read-only
// (with everything mounted beneath it) when ro. A symlink is copied as a
// symlink, as /bin → usr/bin is on merged systems. A missing path is
// skipped.
func bindInto(root, path string, ro bool) error {
	path = filepath.Clean(path)
	fi, err := os.Lstat(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	dst := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		if _, err := os.Lstat(dst); err == nil {
			return nil
		}
		return os.Symlink(target, dst)
	}
	if fi.IsDir() {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
	} else if _, err := os.Lstat(dst); os.IsNotExist(err) {
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return err
		}
	}
	if err := unix.Mount(path, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", path, err)
	}
	if !ro {
		return nil
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("read-only %s: %w", path, err)
	}
	return nil
}

// loopbackUp brings up lo in the new network namespace: the proxies'
// forwards listen there.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// forward listens on 127.0.0.1:port inside the network namespace for each
// port and relays every connection to the proxy's unix socket, which
// lives outside it. The goroutines end with the supervisor.
func forward(ports []int, sockets map[int]string) error {
	for _, port := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return err
		}
		sock := sockets[port]
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go relay(c, sock)
			}
		}()
	}
	return nil
}

func relay(c net.Conn, sock string) {
	defer c.Close()
	u, err := net.Dial("unix", sock)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(u, c)
		u.(*net.UnixConn).CloseWrite()
		close(done)
	}()
	io.Copy(c, u)
	c.(*net.TCPConn).CloseWrite()
	<-done
}
