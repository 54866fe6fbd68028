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
