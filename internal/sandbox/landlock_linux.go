package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The Landlock ABI's structures, as the kernel lays them out. x/sys has
// the ruleset attribute with the fields of later ABIs; the kernel takes
// the size it is given, so this one is exactly what ABI 6 and 7 know.
type landlockRulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

type landlockPathBeneathAttr struct { // packed in the kernel: 12 bytes
	allowedAccess uint64
	parentFD      int32
}

type landlockNetPortAttr struct {
	allowedAccess uint64
	port          uint64
}

const landlockRuleNetPort = 2

// landlockABI returns the kernel's Landlock ABI version, 0 without
// Landlock.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// Filesystem rights, by the ABI that brought them.
const (
	fsRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	// fsAllV1 are the rights of ABI 1; REFER came with 2, TRUNCATE with
	// 3, IOCTL_DEV with 5.
	fsAllV1 = fsRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	fsAll = fsAllV1 | unix.LANDLOCK_ACCESS_FS_REFER | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	// fsWritable is what a writable tree grants: everything but making
	// device nodes.
	fsWritable = fsAll &^ (unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK)
	// fsFileRights are the rights a rule on a file (not a directory) may
	// hold.
	fsFileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	// fsDevice is what the character devices every program expects grant.
	fsDevice = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE
)

// devices are the device files a command may use.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// landlock confines the calling thread, and what it executes, to the
// policy's paths and ports. Called in stage 2, after no_new_privs.
func landlock(cfg helperConfig) error {
	abi := landlockABI()
	if abi < MinLandlockABI {
		return fmt.Errorf("Landlock ABI %d, need %d", abi, MinLandlockABI)
	}
	attr := landlockRulesetAttr{
		handledAccessFS: fsAll,
		scoped:          unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET,
	}
	// In its own network namespace the command may use TCP as it likes:
	// nothing but the forwarded proxies is there. Outside one, TCP is
	// the way to every loopback service of the host, so it is confined.
	if !cfg.InNamespace {
		attr.handledAccessNet = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)

	p := cfg.Policy
	for _, path := range append(append([]string(nil), cfg.ReadOnly...), p.ReadOnly...) {
		if err := allowPath(ruleset, path, fsRead, true); err != nil {
			return err
		}
	}
	for _, path := range append([]string{p.Workspace}, p.Writable...) {
		if err := allowPath(ruleset, path, fsWritable, false); err != nil {
			return err
		}
	}
	for _, path := range devices {
		if err := allowPath(ruleset, path, fsDevice, true); err != nil {
			return err
		}
	}
	// /proc: in a PID namespace it shows the command's own processes; on
	// the host it shows others too, but Landlock refuses ptrace-class
	// access (environ, mem, fd) to every process outside the domain.
	if err := allowPath(ruleset, "/proc", unix.LANDLOCK_ACCESS_FS_READ_FILE|unix.LANDLOCK_ACCESS_FS_READ_DIR, true); err != nil {
		return err
	}
	if cfg.InNamespace {
		for _, path := range []string{"/tmp", "/dev/shm"} {
			if err := allowPath(ruleset, path, fsWritable, true); err != nil {
				return err
			}
		}
	}
	if attr.handledAccessNet != 0 {
		for _, port := range p.Ports {
			if err := allowPort(ruleset, port, unix.LANDLOCK_ACCESS_NET_CONNECT_TCP); err != nil {
				return err
			}
		}
		// Listening on a port the kernel picks is allowed; no one outside
		// the domain can connect to it, and nothing inside but the
		// command itself.
		if err := allowPort(ruleset, 0, unix.LANDLOCK_ACCESS_NET_BIND_TCP); err != nil {
			return err
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// allowPath adds a rule granting rights beneath path. A path that does not
// exist is an error unless optional.
func allowPath(ruleset int, path string, rights uint64, optional bool) error {
	fd, err := unix.Open(filepath.Clean(path), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if optional && os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("landlock: %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock: %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= fsFileRights
	}
	rule := landlockPathBeneathAttr{allowedAccess: rights, parentFD: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("landlock: rule for %s: %w", path, errno)
	}
	return nil
}

func allowPort(ruleset, port int, rights uint64) error {
	rule := landlockNetPortAttr{allowedAccess: rights, port: uint64(port)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), landlockRuleNetPort,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("landlock: rule for port %d: %w", port, errno)
	}
	return nil
}

// unixMemfd makes an anonymous memory file that is inherited across exec.
func unixMemfd(name string) (int, error) { return unix.MemfdCreate(name, 0) }
