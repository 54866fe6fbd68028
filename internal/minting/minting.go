// Package minting obtains short-lived WorkerTokens from the control-plane's
// mint endpoint and attaches them to model calls: as an http.RoundTripper for
// the in-process harness, and for the LocalGatewayProxy.
package minting

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/defaults"
	"github.com/talkide/platform/internal/observe"
)

// Aliases of the wire names in contract, for callers of this package.
const (
	MintPath           = contract.MintPath
	ConversationHeader = contract.ConversationHeader
	TokenHeader        = contract.TokenHeader
)

// ErrMint wraps every failure to obtain a token.
var ErrMint = errors.New("mint worker token")

// refreshBefore is how long before expiry a cached token is replaced, so that
// a token never expires during the call it was attached to.
const refreshBefore = 30 * time.Second

// Options configure a Minter.
type Options struct {
	// HTTPClient calls the mint endpoint; nil means a client with a 10 s
	// timeout.
	HTTPClient *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Minter mints and caches WorkerTokens per conversation.
type Minter struct {
	mintURL  string
	identity func() (string, error)
	hc       *http.Client
	now      func() time.Time

	mu sync.Mutex
	// guarded by mu
	cache map[string]cached
}

type cached struct {
	token   string
	expires time.Time
}

// New returns a Minter calling the mint endpoint of the control-plane at
// baseURL (TALKIDE_GATEWAY_BASE_URL). identity returns the current identity
// token; it is called for every mint, so a rotated token file takes effect
// without a restart.
func New(baseURL string, identity func() (string, error), opts *Options) *Minter {
	o := defaults.Copy(opts)
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	defaults.Clock(&o.Now)
	return &Minter{
		mintURL:  strings.TrimRight(baseURL, "/") + MintPath,
		identity: identity,
		hc:       o.HTTPClient,
		now:      o.Now,
		cache:    make(map[string]cached),
	}
}

// Token returns a WorkerToken for conversationID valid for at least
// refreshBefore, minting a new one when needed.
func (m *Minter) Token(ctx context.Context, conversationID string) (string, error) {
	if err := contract.ValidateConversationID(conversationID); err != nil {
		return "", fmt.Errorf("%w: %w", ErrMint, err)
	}
	m.mu.Lock()
	c, ok := m.cache[conversationID]
	m.mu.Unlock()
	if ok && m.now().Add(refreshBefore).Before(c.expires) {
		return c.token, nil
	}
	resp, err := m.mint(ctx, conversationID)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cache[conversationID] = cached{token: resp.Token, expires: resp.ExpiresAt}
	// Drop expired entries so the cache stays as small as the set of
	// conversations active in the last two minutes.
	for id, c := range m.cache {
		if !m.now().Before(c.expires) {
			delete(m.cache, id)
		}
	}
	return resp.Token, nil
}

func (m *Minter) mint(ctx context.Context, conversationID string) (out contract.MintResponse, err error) {
	ctx, span := observe.Start(ctx, observe.FromContext(ctx, "minting"), "worker token mint",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(observe.Conversation.String(conversationID)))
	defer func() { observe.End(span, err, "mint_failed") }()
	identity, err := m.identity()
	if err != nil {
		return out, fmt.Errorf("%w: read identity token: %w", ErrMint, err)
	}
	body, _ := json.Marshal(contract.MintRequest{ConversationID: conversationID})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.mintURL, bytes.NewReader(body))
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrMint, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+identity)
	resp, err := m.hc.Do(req)
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrMint, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrMint, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e contract.Error
		_ = json.Unmarshal(data, &e)
		return out, fmt.Errorf("%w: control-plane answered %d %s: %s", ErrMint, resp.StatusCode, e.Error.Code, e.Error.Message)
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Token == "" {
		return out, fmt.Errorf("%w: malformed mint response", ErrMint)
	}
	return out, nil
}

// Transport is an http.RoundTripper that replaces every client credential on
// a request with a WorkerToken for the request's conversation. The request
// names its conversation in exactly one ConversationHeader: the native
// harness sets it on each model call, the LocalGatewayProxy on each request
// it forwards. The header goes on to the gateway, which checks it against
// the token.
type Transport struct {
	Minter *Minter
	// Base sends the request; nil means http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ids := req.Header.Values(ConversationHeader)
	if len(ids) != 1 || ids[0] == "" {
		closeBody(req)
		return nil, fmt.Errorf("%w: the request must name exactly one conversation in %s", ErrMint, ConversationHeader)
	}
	id := ids[0]
	tok, err := t.Minter.Token(req.Context(), id)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	out := req.Clone(req.Context())
	for _, h := range []string{"Authorization", "X-Api-Key", "Proxy-Authorization", "Cookie"} {
		out.Header.Del(h)
	}
	out.Header.Set(TokenHeader, tok)
	out.Header.Set(ConversationHeader, id)
	// The gateway continues this trace once the token has verified.
	observe.Inject(req.Context(), out.Header)
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(out)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
