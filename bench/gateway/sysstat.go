package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// counters is what a phase is measured by, besides its requests' times.
type counters struct {
	wall     time.Time
	cpu      time.Duration // this process: user + system
	serverPG map[int]int64 // the PostgreSQL server's processes' CPU, by pid, in ticks; nil when unknown
	mallocs  uint64
	bytes    uint64 // allocated
	numGC    uint32
	pauseNs  uint64
	// The whole machine's CPU time (/proc/stat): busy (steal excluded)
	// and stolen by the hypervisor.
	machineBusy, machineSteal time.Duration
}

// sample reads the counters. It stops the world briefly (ReadMemStats), so
// it is called outside the measured requests only.
func sample(pg *pgServer) counters {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	c := counters{
		cpu:     processCPU(),
		mallocs: ms.Mallocs,
		bytes:   ms.TotalAlloc,
		numGC:   ms.NumGC,
		pauseNs: ms.PauseTotalNs,
	}
	if pg != nil {
		c.serverPG = pg.cpu()
	}
	c.machineBusy, c.machineSteal = machineCPU()
	c.wall = time.Now()
	return c
}

// processCPU is the user and system time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU reads the busy and stolen CPU time of the whole machine, all
// CPUs summed, from the first line of /proc/stat.
func machineCPU() (busy, steal time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	var v [8]int64 // user nice system idle iowait irq softirq steal
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	return time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]) * clockTick, time.Duration(v[7]) * clockTick
}

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// pgServer is a PostgreSQL server running on this machine, whose CPU time
// is read from /proc: the postmaster and its children (the backends of
// the pool, which live as long as the pool's connections, and the server's
// own workers).
type pgServer struct {
	postmaster int
}

// findPGServer finds the postmaster of the server dsn names, when it runs
// on this machine (in this pid namespace). It returns nil when it does not.
func findPGServer(ctx context.Context, dsn string) *pgServer {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil
	}
	defer conn.Close(context.Background())
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return nil
	}
	st, ok := procStat(backend)
	if !ok || !strings.HasPrefix(st.comm, "postgres") {
		return nil
	}
	pm, ok := procStat(st.ppid)
	if !ok || !strings.HasPrefix(pm.comm, "postgres") {
		return nil
	}
	return &pgServer{postmaster: st.ppid}
}

// cpu returns the user and system time of the postmaster and each of its
// children, by pid, in clock ticks.
func (s *pgServer) cpu() map[int]int64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	ticks := map[int]int64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := procStat(pid)
		if ok && (pid == s.postmaster || st.ppid == s.postmaster) {
			ticks[pid] = st.utime + st.stime
		}
	}
	return ticks
}

// pgDelta is the server's CPU time between two readings: what each process
// alive at the second used since the first (all of it, if it started since).
// A process that ended in between is not counted.
func pgDelta(before, after map[int]int64) time.Duration {
	var ticks int64
	for pid, t := range after {
		ticks += max(0, t-before[pid])
	}
	return time.Duration(ticks) * clockTick
}

type stat struct {
	comm         string
	ppid         int
	utime, stime int64 // clock ticks
}

// procStat reads /proc/PID/stat.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, false
	}
	// pid (comm) state ppid ... utime(14) stime(15); comm may hold spaces
	// and parentheses, so split after its last ')'.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return stat{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 13 {
		return stat{}, false
	}
	var s stat
	s.comm = string(b[open+1 : end])
	s.ppid, _ = strconv.Atoi(f[1])
	s.utime, _ = strconv.ParseInt(f[11], 10, 64)
	s.stime, _ = strconv.ParseInt(f[12], 10, 64)
	return s, true
}

// machine describes where the benchmark runs.
type machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpu_model"`
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	GOGC       string `json:"gogc"`
	GOMEMLIMIT string `json:"gomemlimit"`
}

func describeMachine() machine {
	m := machine{
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		GOGC:       os.Getenv("GOGC"),
		GOMEMLIMIT: os.Getenv("GOMEMLIMIT"),
	}
	if m.GOGC == "" {
		m.GOGC = "100 (default)"
	}
	if m.GOMEMLIMIT == "" {
		m.GOMEMLIMIT = "none"
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS += ", Linux " + strings.TrimSpace(string(b))
	}
	return m
}

func (m machine) String() string {
	return fmt.Sprintf("%d CPUs (%s), GOMAXPROCS %d, %s, %s, GOGC %s, GOMEMLIMIT %s",
		m.CPUs, m.CPUModel, m.GOMAXPROCS, m.GoVersion, m.OS, m.GOGC, m.GOMEMLIMIT)
}
