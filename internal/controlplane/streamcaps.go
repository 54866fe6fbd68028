package controlplane

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// The defaults of the stream caps (Options).
const (
	// DefaultMaxStreamsPerUser is more browser tabs than a person keeps
	// open on one control-plane replica, and far fewer than an attacker
	// needs to exhaust it.
	DefaultMaxStreamsPerUser = 32
	// DefaultMaxStreamsPerConversation bounds the browsers that follow
	// one conversation; the hub shares one worker stream among them.
	DefaultMaxStreamsPerConversation = 16
	// MaxStreamsCeiling bounds the default total however high the
	// descriptor limit is: each stream costs two goroutines and their
	// buffers (docs/benchmarks.md), and a replica with more browsers than
	// this needs a sibling.
	MaxStreamsCeiling = 20000
	// FDsPerStream is what a stream may hold at worst when the total is
	// derived from the descriptor limit: the browser's connection, a
	// worker stream of its own while it catches up, and that stream's
	// other end when the worker runs in the same process (talkide dev).
	FDsPerStream = 4
)

// DefaultMaxStreams is the total cap on browser streams of a process that
// may hold limit file descriptors: what is left after fdlimit.Reserve,
// FDsPerStream each, at most MaxStreamsCeiling, at least 1.
func DefaultMaxStreams(limit uint64) int {
	n := (limit - fdlimit.Reserve(limit)) / FDsPerStream
	return int(max(1, min(n, MaxStreamsCeiling)))
}

// StreamLimits are the caps in force (Server.StreamLimits).
type StreamLimits struct {
	PerUser, PerConversation, Total int
}

// The caps' names, as the refusal and the metric name them.
const (
	limitUser         = "user"
	limitConversation = "conversation"
	limitTotal        = "total"
)

// streamCaps counts the open browser streams and refuses one beyond a
// cap. A refusal costs a map lookup under one mutex; this replica's counts
// are exact, because a stream's release runs when its handler returns,
// whatever ended it.
//
// When the replicas share their counts (streamshare.go), the per-user and
// per-conversation caps also count what the other replicas last published
// (elsewhere): an atomic load and a map lookup, never a store round trip.
// The total stays this replica's own: it protects this process's file
// descriptors, which the others' streams do not use.
type streamCaps struct {
	limits  StreamLimits
	refused func(limit string)
	shared  bool // the counts are published: changes are marked in dirty

	// elsewhere is the other replicas' counts; nil when not shared, or
	// when they are too old to trust.
	elsewhere atomic.Pointer[elsewhere]

	mu    sync.Mutex
	users map[string]int       // open streams by user; guarded by mu
	convs map[string]int       // open streams by conversation; guarded by mu
	open  int                  // guarded by mu
	dirty map[subject]struct{} // counts changed since the last publication; guarded by mu
}

func newStreamCaps(l StreamLimits, refused func(string), shared bool) *streamCaps {
	return &streamCaps{limits: l, refused: refused, shared: shared,
		users: map[string]int{}, convs: map[string]int{}, dirty: map[subject]struct{}{}}
}

// acquire takes a slot for a stream of user on conversation conv, or
// refuses: 429 for a user's or a conversation's cap (the client holds too
// many; closing one frees a slot), 503 for the total (the replica is
// full; another may not be). release must be called exactly once.
func (c *streamCaps) acquire(user, conv string) (release func(), err error) {
	var otherUser, otherConv int
	if e := c.elsewhere.Load(); e != nil {
		otherUser, otherConv = e.users[user], e.convs[conv]
	}
	c.mu.Lock()
	var limit string
	switch {
	case c.users[user]+otherUser >= c.limits.PerUser:
		limit = limitUser
	case c.convs[conv]+otherConv >= c.limits.PerConversation:
		limit = limitConversation
	case c.open >= c.limits.Total:
		limit = limitTotal
	default:
		c.open++
		c.users[user]++
		c.convs[conv]++
		c.mark(user, conv)
		c.mu.Unlock()
		var once sync.Once
		return func() { once.Do(func() { c.release(user, conv) }) }, nil
	}
	c.mu.Unlock()
	if c.refused != nil {
		c.refused(limit)
	}
	return nil, c.refusal(limit)
}

func (c *streamCaps) release(user, conv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	if c.users[user]--; c.users[user] <= 0 {
		delete(c.users, user)
	}
	if c.convs[conv]--; c.convs[conv] <= 0 {
		delete(c.convs, conv)
	}
	c.mark(user, conv)
}

// mark notes that user's and conv's counts changed. Called with mu held.
func (c *streamCaps) mark(user, conv string) {
	if c.shared {
		c.dirty[subject{store.StreamsOfUser, user}] = struct{}{}
		c.dirty[subject{store.StreamsOfConversation, conv}] = struct{}{}
	}
}

// changes returns the counts to publish: those changed since the last
// call (0 for one that has no stream left), or with whole every count.
// Only the changed ones are copied under the mutex, so a busy replica's
// admissions do not wait on a copy of all its counts every interval.
func (c *streamCaps) changes(whole bool) []store.StreamCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	var cs []store.StreamCount
	if whole {
		cs = make([]store.StreamCount, 0, len(c.users)+len(c.convs))
		for u, n := range c.users {
			cs = append(cs, store.StreamCount{Kind: store.StreamsOfUser, Subject: u, Streams: int64(n)})
		}
		for cv, n := range c.convs {
			cs = append(cs, store.StreamCount{Kind: store.StreamsOfConversation, Subject: cv, Streams: int64(n)})
		}
	} else {
		cs = make([]store.StreamCount, 0, len(c.dirty))
		for k := range c.dirty {
			n := c.users[k.id]
			if k.kind == store.StreamsOfConversation {
				n = c.convs[k.id]
			}
			cs = append(cs, store.StreamCount{Kind: k.kind, Subject: k.id, Streams: int64(n)})
		}
	}
	clear(c.dirty)
	return cs
}

// counts returns the open streams, and how many users and conversations
// have any (a test's check that nothing leaked).
func (c *streamCaps) counts() (open, users, convs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, len(c.users), len(c.convs)
}

func (c *streamCaps) refusal(limit string) *httpapi.Error {
	e := &httpapi.Error{Status: http.StatusTooManyRequests, Code: contract.CodeTooManyStreams, RetryAfter: "5"}
	switch limit {
	case limitUser:
		e.Msg = fmt.Sprintf("too many event streams open for this user (the per-user cap is %d%s); close one, or retry later", c.limits.PerUser, c.across())
	case limitConversation:
		e.Msg = fmt.Sprintf("too many event streams open on this conversation (the per-conversation cap is %d%s); close one, or retry later", c.limits.PerConversation, c.across())
	default:
		e.Status = http.StatusServiceUnavailable
		e.RetryAfter = "1"
		e.Msg = fmt.Sprintf("this control-plane has as many event streams open as it allows (the total cap is %d); retry shortly", c.limits.Total)
	}
	return e
}

// across says where a per-user or per-conversation cap counts.
func (c *streamCaps) across() string {
	if c.shared {
		return ", across the control-plane replicas"
	}
	return ""
}
