package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/talkide/platform/internal/store"
)

// DefaultConversationTTL is how long the gateway remembers a conversation
// it looked up, by default.
const DefaultConversationTTL = time.Minute

// maxCachedConversations bounds the conversation cache; when it is full, an
// arbitrary entry makes room for the new one.
const maxCachedConversations = 16384

// convCache remembers the conversations the store returned, by id, so that
// a conversation's calls after its first do not wait for the database
// (bench/gateway measured the lookup at one store round trip per call,
// queued behind the budget's writes under load).
//
// Only what a conversation's lookup decides is kept: its tenant, env and
// user, which never change (the store refuses to create an id again for
// another owner, and nothing moves a conversation). The WorkerToken is
// still verified on every call, and the cached tenant and env are compared
// with its claims every time. A lookup that fails (not found, or the store
// failing) is not cached. An entry lives for the TTL: were conversations
// ever deleted, a deleted one would stay callable for at most that long,
// by a holder of a token for it (tokens live two minutes).
//
// A nil *convCache caches nothing.
type convCache struct {
	ttl time.Duration

	mu sync.Mutex
	m  map[string]cachedConv // guarded by mu; by conversation id
}

type cachedConv struct {
	conv  store.Conversation
	until time.Time
}

// newConvCache returns a cache whose entries live ttl; nil when ttl is not
// positive.
func newConvCache(ttl time.Duration) *convCache {
	if ttl <= 0 {
		return nil
	}
	return &convCache{ttl: ttl, m: make(map[string]cachedConv)}
}

func (c *convCache) get(id string, now time.Time) (store.Conversation, bool) {
	if c == nil {
		return store.Conversation{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || !now.Before(e.until) {
		return store.Conversation{}, false
	}
	return e.conv, true
}

func (c *convCache) put(conv store.Conversation, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[conv.ID]; !ok && len(c.m) >= maxCachedConversations {
		for id := range c.m { // map order is arbitrary: evict one entry
			delete(c.m, id)
			break
		}
	}
	c.m[conv.ID] = cachedConv{conv: conv, until: now.Add(c.ttl)}
}

// conversation returns the conversation id, from the cache when it was
// looked up within the TTL.
func (g *Gateway) conversation(ctx context.Context, id string) (store.Conversation, error) {
	now := g.now()
	if conv, ok := g.convs.get(id, now); ok {
		return conv, nil
	}
	conv, err := g.store.GetConversation(ctx, id)
	if err != nil {
		return store.Conversation{}, err
	}
	g.convs.put(conv, now)
	return conv, nil
}
