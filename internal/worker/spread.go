package worker

import (
	"context"
	"slices"
	"time"
)

// spread releases sessions when this replica holds clearly more open
// sessions than the mean of the tenant-env's replicas that take new
// conversations (a replica just added holds none): the longest idle ones
// with no running turn, no stream and nothing to report, idle for at
// least RebalanceIdle, down to the mean and at most maxReleasesPerPass.
// Their leases released, each is placed anew at its next command. A
// draining replica leaves this to its drain.
func (w *Worker) spread(ctx context.Context) {
	if w.router == nil || w.gate.closing() {
		return
	}
	peers, _ := w.router.replicas.Peers()
	self := w.ReplicaEntry()
	n, total := 1, self.OpenSessions
	for _, p := range peers {
		if !p.Draining {
			n++
			total += p.OpenSessions
		}
	}
	mean := (total + n - 1) / n
	if n == 1 || self.OpenSessions <= mean+placementSlack {
		return
	}
	excess := min(self.OpenSessions-mean, maxReleasesPerPass)
	idleBefore := w.opts.Now().Add(-w.opts.RebalanceIdle)
	var idle []*session
	used := map[*session]time.Time{}
	for _, s := range w.openSessions() {
		if s.idle(idleBefore) {
			idle = append(idle, s)
			s.mu.Lock()
			used[s] = s.lastUsed
			s.mu.Unlock()
		}
	}
	slices.SortFunc(idle, func(a, b *session) int { return used[a].Compare(used[b]) })
	// Claimed one by one: a session used since it was found idle stays.
	claimed := idle[:0]
	for _, s := range idle {
		if len(claimed) == excess {
			break
		}
		if s.claimIdle(idleBefore) {
			w.drop(s)
			claimed = append(claimed, s)
		}
	}
	idle = claimed
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionCloseTimeout)
	defer cancel()
	sideBySide(idle, func(s *session) { s.close(cctx) }) // a failure is logged by the session
	w.releasedRebalance.Add(int64(len(idle)))
	if len(idle) > 0 {
		w.log.Info("released idle sessions to spread the load", "sessions", len(idle), "open", self.OpenSessions, "mean", mean)
	}
}
