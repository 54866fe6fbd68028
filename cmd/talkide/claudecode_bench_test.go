package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procStatus reads one "Key: N kB" field of /proc/<pid>/status in bytes.
func procStatus(pid int, key string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == key+":" {
			kb, _ := strconv.ParseFloat(string(f[1]), 64)
			return kb * 1024
		}
	}
	return 0
}

// procCPU is a process's user+system time with that of its waited-for
// children, from /proc/<pid>/stat (in clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		if k < len(f) {
			n, _ := strconv.ParseInt(f[k], 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// treeRSS sums the resident memory of the processes working in dir (the
// CLIs and the tools they run).
func treeRSS(dir string) float64 {
	var sum float64
	for _, pid := range processesIn(dir) {
		sum += procStatus(pid, "VmRSS")
	}
	return sum
}

func treeCPU(dir string) time.Duration {
	var sum time.Duration
	for _, pid := range processesIn(dir) {
		sum += procCPU(pid)
	}
	return sum
}

// BenchmarkClaudeCodeSessions is BenchmarkSessionMemory's shape for the
// claude-code harness with the real CLI, at 1 and 5 sessions: the resident
// memory of the CLI processes (RSS summed over every process working in
// the workspaces) per idle session (its CLI kept for the next turn) and
// per active one (a turn held open by a slow model reply), the CPU of the
// CLIs per turn, the CPU of this process (control-plane, worker, gateway,
// simulator) per turn, and the wall time of a session's first turn, which
// starts its CLI. Run with -benchtime=1x and TALKIDE_CLAUDE_CODE_BIN set.
func BenchmarkClaudeCodeSessions(b *testing.B) {
	if os.Getenv("TALKIDE_CLAUDE_CODE_BIN") == "" {
		b.Skip("TALKIDE_CLAUDE_CODE_BIN is not set: TALKIDE_CLAUDE_CODE_BIN=$(./scripts/claude-code.sh) go test ./cmd/talkide -run XXX -bench ClaudeCode -benchtime 1x")
	}
	for _, n := range []int{1, 5} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			for b.Loop() {
				measureClaudeCodeSessions(b, n)
			}
		})
	}
}

func measureClaudeCodeSessions(b *testing.B, n int) {
	st := startClaudeCodeStack(b, slog.New(slog.DiscardHandler))
	base := st.Info.ControlPlane
	ws := st.Info.Workspaces
	ids := make([]string, n)
	parallel(b, n, func(i int) { ids[i] = createConversation(b, base).ID })

	// First turns: each starts its session's CLI.
	first := time.Now()
	parallel(b, n, func(i int) {
		r := send(b, base, ids[i], "hello")
		readStream(b, base, ids[i], 0, turnEnded(r.TurnID))
	})
	firstTurn := time.Since(first)
	if got := len(processesIn(ws)); got != n {
		b.Fatalf("%d processes in the workspaces after the first turns, want %d CLIs", got, n)
	}
	idle := treeRSS(ws)

	// One turn each, held open by a slow model reply.
	cliStart, selfStart := treeCPU(ws), cpuTime()
	parallel(b, n, func(i int) { send(b, base, ids[i], "[[sleep:1500]] hold this turn open for a while") })
	deadline := time.Now().Add(60 * time.Second)
	var active float64
	for {
		running := st.Worker.Worker.Load().RunningTurns
		if running == n {
			active = max(active, treeRSS(ws))
		}
		if running == 0 && active > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the turns did not all run and finish")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cli, self := treeCPU(ws)-cliStart, cpuTime()-selfStart

	const mib = 1 << 20
	b.ReportMetric(idle/float64(n)/mib, "MiB/idle-session")
	b.ReportMetric(active/float64(n)/mib, "MiB/active-session")
	b.ReportMetric(float64(cli.Milliseconds())/float64(n), "ms-CPU-CLI/turn")
	b.ReportMetric(float64(self.Milliseconds())/float64(n), "ms-CPU-platform/turn")
	b.ReportMetric(firstTurn.Seconds(), "s/first-turns")
	b.ReportMetric(active/mib, "MiB-RSS-CLIs")
}
