package contract

import "time"

// The gateway side of the seam: how a worker obtains WorkerTokens and how it
// presents them to the control-plane's gateway-proxy.
const (
	// MintPath is the control-plane's WorkerToken mint endpoint,
	// authenticated by the worker's identity token (Authorization: Bearer).
	MintPath = "/api/v1/worker-gateway/token/mint"
	// GatewayPrefix is where the gateway-proxy serves the Anthropic API;
	// the worker's base URL for model calls is the control-plane's URL
	// plus this prefix.
	GatewayPrefix = "/api/internal/gateway/anthropic"
	// TokenHeader carries a WorkerToken to the gateway (Authorization:
	// Bearer is accepted too, for Anthropic SDKs).
	TokenHeader = "X-Worker-Token"
	// ConversationHeader names the conversation of a gateway call; the
	// gateway checks it against the token's scope.
	ConversationHeader = "X-Talkide-Conversation"
)

// TitlePrompt is the system prompt of the control-plane's call that names
// a new conversation; the user's first message is the call's one message.
// The model simulator recognises a title request by it.
const TitlePrompt = "Name this conversation: answer with a title of at most six words for it, " +
	"in the language of the user's message, on one line, without quotes and without a full stop. " +
	"The user's first message follows; do not answer it."

// MintRequest is the body of a mint call.
type MintRequest struct {
	ConversationID string `json:"conversation_id"`
}

// MintResponse is the mint endpoint's answer.
type MintResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	KeyID     string    `json:"key_id"`
}

// BudgetMessagePrefix starts the message of every budget denial the
// gateway-proxy answers (error.message of its 429, and of the error event
// that ends a stream a hard limit cut off). A client that sees only the
// message, as a subprocess harness may, can still tell a budget denial from
// the model API's own rate limit by it.
const BudgetMessagePrefix = "budget: "

// BudgetDenial is a budget limit's refusal of a model call, as the
// gateway-proxy reports it (error.talkide_budget of its error body) and as
// turn.failed carries it (failure.budget). Amounts follow the operator API:
// a spending limit's in dollars as exact decimal strings (the _usd fields),
// the other kinds' as counts; exactly one of each pair is set.
type BudgetDenial struct {
	Scope   string `json:"scope"`   // user, tenant or env
	Subject string `json:"subject"` // a user id, a tenant, or "tenant/env"
	Kind    string `json:"kind"`    // spend_per_day, spend_per_5h, tokens_per_day, concurrent_requests, …
	Hard    bool   `json:"hard,omitempty"`

	// MaxUSD is the limit; UsedUSD what was settled in its window; HeldUSD
	// what calls in flight hold; NeedUSD what the refused call (or, mid-
	// stream, the stream's growth) needed.
	MaxUSD  string `json:"max_usd,omitempty"`
	UsedUSD string `json:"used_usd,omitempty"`
	HeldUSD string `json:"held_usd,omitempty"`
	NeedUSD string `json:"need_usd,omitempty"`
	// The same for limits that count tokens, requests or calls.
	Max  *int64 `json:"max,omitempty"`
	Used *int64 `json:"used,omitempty"`
	Held *int64 `json:"held,omitempty"`
	Need *int64 `json:"need,omitempty"`

	// InFlight: only calls in flight stand in the way; a retry after they
	// have finished may pass.
	InFlight bool `json:"in_flight,omitempty"`
	// MidStream: a hard limit cut a response off while it streamed.
	MidStream bool `json:"mid_stream,omitempty"`
	// ResetsAt is when the limit's window next frees room; absent when
	// unknown (in flight, the concurrency limit).
	ResetsAt *time.Time `json:"resets_at,omitempty"`
	// RetryAfterSeconds is the earliest a retry can pass, as far as the
	// gateway knows (its Retry-After).
	RetryAfterSeconds int64 `json:"retry_after_seconds,omitempty"`
}
