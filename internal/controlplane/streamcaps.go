package controlplane

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/fdlimit"
	"github.com/talkide/platform/internal/httpapi"
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
// cap. A refusal costs a map lookup under one mutex; the counts are
// exact, because a stream's release runs when its handler returns,
// whatever ended it.
type streamCaps struct {
	limits  StreamLimits
	refused func(limit string)

	mu    sync.Mutex
	users map[string]int // open streams by user; guarded by mu
	convs map[string]int // open streams by conversation; guarded by mu
	open  int            // guarded by mu
}

func newStreamCaps(l StreamLimits, refused func(string)) *streamCaps {
	return &streamCaps{limits: l, refused: refused, users: map[string]int{}, convs: map[string]int{}}
}

// acquire takes a slot for a stream of user on conversation conv, or
// refuses: 429 for a user's or a conversation's cap (the client holds too
// many; closing one frees a slot), 503 for the total (the replica is
// full; another may not be). release must be called exactly once.
func (c *streamCaps) acquire(user, conv string) (release func(), err error) {
	c.mu.Lock()
	var limit string
	switch {
	case c.users[user] >= c.limits.PerUser:
		limit = limitUser
	case c.convs[conv] >= c.limits.PerConversation:
		limit = limitConversation
	case c.open >= c.limits.Total:
		limit = limitTotal
	default:
		c.open++
		c.users[user]++
		c.convs[conv]++
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
		e.Msg = fmt.Sprintf("too many event streams open for this user (the per-user cap is %d); close one, or retry later", c.limits.PerUser)
	case limitConversation:
		e.Msg = fmt.Sprintf("too many event streams open on this conversation (the per-conversation cap is %d); close one, or retry later", c.limits.PerConversation)
	default:
		e.Status = http.StatusServiceUnavailable
		e.RetryAfter = "1"
		e.Msg = fmt.Sprintf("this control-plane has as many event streams open as it allows (the total cap is %d); retry shortly", c.limits.Total)
	}
	return e
}
