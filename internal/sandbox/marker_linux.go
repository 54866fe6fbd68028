package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/talkide/platform/internal/proctree"
)

// A call marker finds every process a command started, wherever it went,
// without a pids cgroup (which a restricted pod does not have) and after
// its supervisor is gone (the subreaper every orphan of the tree comes
// back to while it lives). The supervisor sets RLIMIT_RTTIME, soft and
// hard, to a number of the call's own before it starts the command: every
// process of the tree inherits it across fork and exec, none can change
// it (lowering a hard limit is refused by the seccomp filter, raising one
// needs a capability none has), and /proc/<pid>/limits shows it to the
// worker. RLIMIT_RTTIME bounds only real-time scheduled tasks, which a
// command cannot become (its RLIMIT_RTPRIO is 0), so the number bounds
// nothing.

// markerTag sets every marker apart from the limits people set by hand.
const markerTag = 1 << 52

// markers hands out a sandbox's call markers: a random base, so that
// workers on one host (or one after another) do not share any, and a
// sequence.
type markers struct {
	base uint64
	seq  atomic.Uint64
}

// newMarkers fails when the worker's own hard RLIMIT_RTTIME is finite: a
// marker cannot be raised above it.
func newMarkers() (*markers, error) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_RTTIME, &r); err != nil {
		return nil, err
	}
	if r.Max != unix.RLIM_INFINITY {
		return nil, errors.New("the worker's hard RLIMIT_RTTIME is " + strconv.FormatUint(r.Max, 10) + ", not unlimited")
	}
	var b [8]byte
	rand.Read(b[:])
	return &markers{base: binary.LittleEndian.Uint64(b[:])}, nil
}

// next returns a marker no other call of this process has had.
func (m *markers) next() uint64 {
	if m == nil {
		return 0
	}
	return markerTag | (m.base+m.seq.Add(1))&(markerTag-1)
}

// rttimeLimit is how /proc/<pid>/limits names RLIMIT_RTTIME.
var rttimeLimit = []byte("Max realtime timeout")

// markerOf reads pid's hard RLIMIT_RTTIME; 0 when it cannot be read.
func markerOf(pid string) uint64 {
	b, err := os.ReadFile("/proc/" + pid + "/limits")
	if err != nil {
		return 0
	}
	i := bytes.Index(b, rttimeLimit)
	if i < 0 {
		return 0
	}
	line, _, _ := bytes.Cut(b[i+len(rttimeLimit):], []byte("\n"))
	f := bytes.Fields(line) // soft, hard, unit
	if len(f) < 2 {
		return 0
	}
	v, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// killMarked kills every process that carries marker, again and again
// until none is left alive (one may fork while the others die), and
// returns how many it killed. Each is killed through a pidfd taken before its marker
// is read again, so that a pid reused meanwhile is never killed.
func killMarked(marker uint64) int {
	if marker == 0 {
		return 0
	}
	killed := 0
	for range 100 { // a bound: every round kills what it finds, so the tree shrinks
		found := 0
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return killed
		}
		for _, e := range ents {
			name := e.Name()
			if name[0] < '0' || name[0] > '9' || markerOf(name) != marker {
				continue
			}
			pid, _ := strconv.Atoi(name)
			if f := proctree.Stat(pid); len(f) > 1 && f[0] == "Z" {
				// Dead already. An orphan whose supervisor died may have
				// come to the worker (PID 1 of a container), which reaps
				// it: no one else will. Nothing the worker started
				// itself is marked: its supervisors have been reaped by
				// the time it sweeps for their markers.
				if f[1] == strconv.Itoa(os.Getpid()) {
					unix.Wait4(pid, nil, unix.WNOHANG, nil)
				}
				continue
			}
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue // gone
			}
			if markerOf(name) == marker && unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
				found++
			}
			unix.Close(fd)
		}
		if found == 0 {
			return killed
		}
		killed += found
	}
	return killed
}
