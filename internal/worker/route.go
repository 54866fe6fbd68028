package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/observe"
	"github.com/talkide/platform/internal/replicaset"
	"github.com/talkide/platform/internal/sessionstore"
)

// Routing among the replicas of one tenant-env (docs/sessions.md): the
// control-plane reaches them through one Service, which lands a command on
// any of them; the replica it lands on serves the command itself, or
// forwards it, verified, to the replica holding the conversation's lease,
// or, for a conversation nobody holds, to the least loaded replica.

// ForwardedHeader marks a command one replica forwarded to another; its
// value names the forwarder. A command carrying it is served where it
// arrives and never forwarded again, so no two replicas with different
// views of the volume can bounce a command between them.
const ForwardedHeader = "Talkide-Forwarded-By"

// Why a command was forwarded, as the metrics name it.
const (
	ForwardHolder    = "holder"    // another replica holds the conversation
	ForwardPlacement = "placement" // nobody did, and another replica is less loaded
)

// Spreading's bounds.
const (
	// placementSlack is how many more open sessions than the least loaded
	// replica this one may hold and still keep a new conversation: every
	// forward costs a hop, and the registry's counts are seconds old.
	placementSlack = 4
	// turnSlack is how much more of its bound on running turns this
	// replica may be running than the least busy one and still count
	// among the best.
	turnSlack = 0.25
	// maxReleasesPerPass bounds the idle sessions one maintenance pass
	// gives up to spread the load: a handful at a time, each placed anew
	// at its next command, rather than a wave.
	maxReleasesPerPass = 32
	// DefaultRebalanceIdle is how long a session must have gone unused
	// before it is released to spread the load.
	DefaultRebalanceIdle = 30 * time.Second
	// fanOutTimeout bounds the wait for the peers' running sessions.
	fanOutTimeout = 3 * time.Second
	// maxPeerAnswer bounds what is read of a peer's answer to the
	// running-sessions listing, and of a refusal the forwarder looks into.
	maxPeerAnswer = 4 << 20
)

// router is what a worker among replicas keeps for routing.
type router struct {
	replicas  *replicaset.Registry
	addr      string // this replica's, for its registry entry
	transport http.RoundTripper

	mu sync.Mutex
	// guarded by mu: the conversations placed on each peer since the
	// registry was last read (gen), which its entry does not count yet.
	gen    uint64
	placed map[string]int
}

func newRouter(replicas *replicaset.Registry, addr string, transport http.RoundTripper) *router {
	if transport == nil {
		transport = &http.Transport{
			// A holder that went away is answered for at once (its lease
			// expires soon), not after the kernel's connect timeout.
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	return &router{replicas: replicas, addr: addr, transport: transport, placed: map[string]int{}}
}

// choose picks where a conversation nobody holds goes: ok false keeps it
// on self. Draining and full replicas take none. The least loaded by
// their running turns' share of their bound, then by open sessions
// (counting what this replica placed since the counts were read); self
// keeps it unless it holds clearly more than the best, and otherwise one
// of the near-best is picked at random, so that replicas reading the same
// counts do not all pick the same one.
func choose(self replicaset.Entry, peers []replicaset.Entry, placed map[string]int, pick func(int) int) (replicaset.Entry, bool) {
	var cands []replicaset.Entry
	for _, e := range append([]replicaset.Entry{self}, peers...) {
		if !e.Draining && !e.Full() {
			cands = append(cands, e)
		}
	}
	if len(cands) == 0 {
		return replicaset.Entry{}, false
	}
	open := func(e replicaset.Entry) int { return e.OpenSessions + placed[e.Holder] }
	minTurns := cands[0].TurnLoad()
	for _, e := range cands {
		minTurns = min(minTurns, e.TurnLoad())
	}
	var fit []replicaset.Entry
	minOpen := -1
	for _, e := range cands {
		if e.TurnLoad() <= minTurns+turnSlack {
			fit = append(fit, e)
			if minOpen < 0 || open(e) < minOpen {
				minOpen = open(e)
			}
		}
	}
	var near []replicaset.Entry
	for _, e := range fit {
		if e.Holder == self.Holder {
			if open(e) <= minOpen+placementSlack {
				return replicaset.Entry{}, false
			}
			continue
		}
		if open(e) <= minOpen+1 {
			near = append(near, e)
		}
	}
	if len(near) == 0 {
		return replicaset.Entry{}, false
	}
	return near[pick(len(near))], true
}

// place returns the peer a conversation nobody holds should go to, or ok
// false to keep it here, and counts it placed.
func (w *Worker) place() (replicaset.Entry, bool) {
	peers, gen := w.router.replicas.Peers()
	self := w.ReplicaEntry()
	w.router.mu.Lock()
	defer w.router.mu.Unlock()
	if gen != w.router.gen {
		w.router.gen, w.router.placed = gen, map[string]int{}
	}
	e, ok := choose(self, peers, w.router.placed, rand.IntN)
	if ok {
		w.router.placed[e.Holder]++
	}
	return e, ok
}

// ReplicaEntry is what this replica publishes in the registry: its
// address and load, and whether it is draining.
func (w *Worker) ReplicaEntry() replicaset.Entry {
	l := w.Load()
	e := replicaset.Entry{RunningTurns: l.RunningTurns, MaxRunningTurns: l.MaxRunningTurns, OpenSessions: l.OpenSessions,
		Draining: w.gate.closing()}
	if w.router != nil {
		e.Holder, e.Addr = w.router.replicas.Holder(), w.router.addr
	}
	return e
}

// holds reports whether this replica has the session of id open or is
// opening it.
func (w *Worker) holds(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, open := w.sessions[id]
	_, loading := w.loading[id]
	return open || loading
}

// route forwards a verified command about conversation id when another
// replica should serve it, and reports whether it did. create says the
// command may create the conversation (a missing one is placed too).
func (w *Worker) route(rw http.ResponseWriter, r *http.Request, body []byte, id string, create bool, local func() error) (bool, error) {
	if w.router == nil || r.Header.Get(ForwardedHeader) != "" || w.holds(id) {
		return false, nil
	}
	li, err := w.store.Lease(id)
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		if !create {
			return false, nil // answered not_found here
		}
	case err != nil:
		return false, nil // the local open meets the same trouble and says so
	case li.Live(w.opts.Now()):
		if li.Holder == w.router.replicas.Holder() || li.Addr == "" || li.Addr == w.router.addr {
			// An earlier opening of ours (the open takes the next fence;
			// under another name if this process restarted on the same
			// address), or a holder that advertises no address (an older
			// replica, a retention tool): served, or refused, as before.
			return false, nil
		}
		return true, w.forward(rw, r, body, li.Addr, ForwardHolder, nil)
	}
	target, ok := w.place()
	if !ok {
		return false, nil
	}
	return true, w.forward(rw, r, body, target.Addr, ForwardPlacement, local)
}

// errBounce is a placement's target declining the command (it began to
// drain, or runs its most turns): it is served here instead.
var errBounce = errors.New("the placement's target declined the command")

// forward sends the verified command, as received, to the replica at addr
// and streams its answer back (event streams flushed as they come). A
// holder that cannot be reached is answered session_elsewhere, as before
// routing existed: its lease expires soon. A placement's target that
// cannot be reached, or declines, leaves the command to local.
func (w *Worker) forward(rw http.ResponseWriter, r *http.Request, body []byte, addr, reason string, local func() error) error {
	target, err := url.Parse(addr)
	if err != nil {
		return err
	}
	// A forwarded stream ends with this replica's drain, as a local one
	// does: the client reconnects through the Service.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(w.base, cancel)()
	var failed error
	proxy := &httputil.ReverseProxy{
		Transport: w.router.transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set(ForwardedHeader, w.router.replicas.Holder())
			// The holder's span is this replica's span's child, not its
			// sibling under the control-plane's (with tracing off, or on
			// a stream, which has no span here, the header goes on as
			// received).
			observe.Inject(pr.In.Context(), pr.Out.Header)
			pr.Out.ContentLength = int64(len(body))
			pr.Out.Body = http.NoBody
			if len(body) > 0 {
				pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if reason == ForwardPlacement && declined(resp) {
				return errBounce
			}
			w.forwarded(reason)
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { failed = err },
	}
	proxy.ServeHTTP(rw, r.WithContext(ctx))
	if failed == nil || r.Context().Err() != nil {
		return nil // answered, or the client has gone
	}
	if local != nil {
		if !errors.Is(failed, errBounce) {
			w.log.Warn("placement target unreachable; serving here", "conversation", r.PathValue("id"), "addr", addr, "err", failed)
		}
		return local()
	}
	w.log.Warn("lease holder unreachable", "conversation", r.PathValue("id"), "addr", addr, "err", failed)
	return fmt.Errorf("the holder at %s is unreachable: %w", addr, sessionstore.ErrLeaseHeld)
}

// declined reports whether a placement's target refused a command it was
// sent because it is draining or full; it leaves resp's body readable.
func declined(resp *http.Response) bool {
	if resp.StatusCode != http.StatusServiceUnavailable {
		return false
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswer))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var e contract.Error
	json.Unmarshal(b, &e)
	return e.Error.Code == contract.CodeShuttingDown || e.Error.Code == contract.CodeWorkerBusy
}

func (w *Worker) forwarded(reason string) {
	if reason == ForwardHolder {
		w.forwardedHolder.Add(1)
	} else {
		w.forwardedPlacement.Add(1)
	}
}

// peersRunning asks every fresh peer, draining ones included (they still
// run their last turns), which of its sessions run a turn, with the
// verified command as received and the hop header set, and adds their
// answers to out. A peer that does not answer in time makes the listing
// Truncated: the control-plane then takes no conversation's absence from
// it as the end of its turn.
func (w *Worker) peersRunning(r *http.Request, out *contract.RunningSessions) {
	peers, _ := w.router.replicas.Peers()
	if len(peers) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), fanOutTimeout)
	defer cancel()
	answers := make([]*contract.RunningSessions, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			rs, err := w.askRunning(ctx, r, p.Addr)
			if err != nil {
				w.log.Warn("a peer did not list its running sessions", "peer", p.Holder, "err", err)
				return
			}
			answers[i] = rs
		})
	}
	wg.Wait()
	seen := make(map[string]bool, len(out.Sessions))
	for _, st := range out.Sessions {
		seen[st.ConversationID] = true
	}
	for _, rs := range answers {
		if rs == nil {
			out.Truncated = true
			continue
		}
		out.Truncated = out.Truncated || rs.Truncated
		for _, st := range rs.Sessions {
			if seen[st.ConversationID] {
				continue
			}
			if len(out.Sessions) == contract.MaxRunningSessions {
				out.Truncated = true
				break
			}
			seen[st.ConversationID] = true
			out.Sessions = append(out.Sessions, st)
		}
	}
}

func (w *Worker) askRunning(ctx context.Context, in *http.Request, addr string) (*contract.RunningSessions, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return nil, err
	}
	u = u.JoinPath(in.URL.Path)
	u.RawQuery = in.URL.RawQuery
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header = in.Header.Clone()
	req.Header.Set(ForwardedHeader, w.router.replicas.Holder())
	resp, err := w.router.transport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the peer answered %s", resp.Status)
	}
	var rs contract.RunningSessions
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxPeerAnswer)).Decode(&rs); err != nil {
		return nil, err
	}
	return &rs, nil
}
