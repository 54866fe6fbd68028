package chatclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/talkide/platform/internal/backoff"
	"github.com/talkide/platform/internal/contract"
)

// Conversation is the browser API's view of a conversation.
type Conversation struct {
	ID        string    `json:"id"`
	Title     string    `json:"title,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// State is the worker session's state; GetConversation sets it, the
	// answer to CreateConversation may not.
	State *contract.SessionState `json:"state,omitempty"`
	// Created is true when CreateConversation created it (HTTP 201) rather
	// than found it.
	Created bool `json:"-"`
}

// CreateConversation creates the conversation id, or returns it if it
// exists. An empty id lets the control-plane choose one; an empty title
// leaves it unset.
func (c *Client) CreateConversation(ctx context.Context, id, title string) (Conversation, error) {
	if id != "" {
		if err := contract.ValidateConversationID(id); err != nil {
			return Conversation{}, fmt.Errorf("chatclient: %w", err)
		}
	}
	req := struct {
		ID    string `json:"id,omitempty"`
		Title string `json:"title,omitempty"`
	}{id, title}
	var conv Conversation
	status, err := c.doJSON(ctx, http.MethodPost, c.base+"/api/conversations", req, &conv)
	if err != nil {
		return Conversation{}, err
	}
	conv.Created = status == http.StatusCreated
	return conv, nil
}

// GetConversation returns conversation id with its session state. An unknown
// id is an *APIError matching ErrNotFound.
func (c *Client) GetConversation(ctx context.Context, id string) (Conversation, error) {
	u, err := c.conversationURL(id, "")
	if err != nil {
		return Conversation{}, err
	}
	var conv Conversation
	if _, err := c.doJSON(ctx, http.MethodGet, u, nil, &conv); err != nil {
		return Conversation{}, err
	}
	return conv, nil
}

// ListConversations returns the conversations the caller may see, newest
// first. A missing or refused credential is an *APIError with status 401.
func (c *Client) ListConversations(ctx context.Context) ([]Conversation, error) {
	var out struct {
		Conversations []Conversation `json:"conversations"`
	}
	if _, err := c.doJSON(ctx, http.MethodGet, c.base+"/api/conversations", nil, &out); err != nil {
		return nil, err
	}
	return out.Conversations, nil
}

// Send posts text as a user message, which starts a turn. It generates a
// client message id and retries transient failures (connection errors,
// 502, 503, 504) with that same id, so the control-plane starts the turn at
// most once; a refusal with Retry-After (worker_busy, session_elsewhere,
// shutting_down) is sent again after that wait for up to 45 seconds. A running turn is an *APIError matching ErrTurnRunning.
func (c *Client) Send(ctx context.Context, id, text string) (contract.SendMessageResponse, error) {
	return c.SendMessage(ctx, id, contract.SendMessageRequest{ClientMessageID: NewMessageID(), Text: text})
}

// NewMessageID returns a fresh client message id. A caller that may send a
// message more than once (after a lost answer, an outage) generates its id
// once and passes it to every SendMessage of that message: the
// control-plane answers a repeated id with the turn it started the first
// time, so the message never starts two turns.
func NewMessageID() string { return contract.NewID("m_") }

// SendMessage is Send with the caller's client message id (which must not
// be empty; see NewMessageID).
func (c *Client) SendMessage(ctx context.Context, id string, req contract.SendMessageRequest) (contract.SendMessageResponse, error) {
	return c.send(ctx, id, req, sendAttempts)
}

// send makes at most attempts tries of req.
func (c *Client) send(ctx context.Context, id string, req contract.SendMessageRequest, attempts int) (contract.SendMessageResponse, error) {
	u, err := c.conversationURL(id, "/messages")
	if err != nil {
		return contract.SendMessageResponse{}, err
	}
	if req.Text == "" {
		return contract.SendMessageResponse{}, errors.New("chatclient: empty message")
	}
	if len(req.Text) > contract.MaxMessageText {
		return contract.SendMessageResponse{}, fmt.Errorf("chatclient: message is longer than %d bytes", contract.MaxMessageText)
	}
	if err := contract.ValidateID("client message id", req.ClientMessageID); err != nil {
		return contract.SendMessageResponse{}, fmt.Errorf("chatclient: %w", err)
	}
	log := c.log.With("conversation", id, "client_message_id", req.ClientMessageID)
	var resp contract.SendMessageResponse
	err = c.retried(ctx, "send", attempts, log, func() error {
		_, err := c.doJSON(ctx, http.MethodPost, u, req, &resp)
		return err
	})
	return resp, err
}

// retried calls call until it succeeds or fails for good. A refusal that
// says when to come back (Retry-After, a transient status) is followed
// until the send patience runs out, and costs no attempt; any other
// transient failure costs one of attempts; what is not transient, or ctx
// ending, is returned at once.
func (c *Client) retried(ctx context.Context, what string, attempts int, log *slog.Logger, call func() error) error {
	b := backoff.New(c.sendRetry)
	patience := time.Now().Add(c.sendPatience)
	failed := 0 // failures that said nothing of when to come back
	for {
		err := call()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("chatclient: %s: %w (last error: %v)", what, ctx.Err(), err)
		}
		d := b.Next()
		var ae *APIError
		if errors.As(err, &ae) && ae.RetryAfter > 0 && transient(err) && time.Now().Add(d).Before(patience) {
			d = max(d, min(ae.RetryAfter, c.retryAfterMax))
		} else if failed++; !transient(err) || failed >= attempts {
			return err
		}
		log.Info("chatclient: "+what+" failed; retrying", "failed", failed, "delay", d, "err", err)
		if cerr := backoff.Sleep(ctx, d); cerr != nil {
			return fmt.Errorf("chatclient: %s: %w (last error: %v)", what, cerr, err)
		}
	}
}

// transient reports whether a failed call may succeed if repeated.
func transient(err error) bool {
	var te *transportError
	if errors.As(err, &te) {
		return true
	}
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

// Interrupt asks the control-plane to stop the conversation's running turn.
// The turn ends with a turn.failed event (code "interrupted") on the stream;
// Interrupted is false when no turn was running.
func (c *Client) Interrupt(ctx context.Context, id string) (contract.InterruptResponse, error) {
	u, err := c.conversationURL(id, "/interrupt")
	if err != nil {
		return contract.InterruptResponse{}, err
	}
	var resp contract.InterruptResponse
	if _, err := c.doJSON(ctx, http.MethodPost, u, nil, &resp); err != nil {
		return contract.InterruptResponse{}, err
	}
	return resp, nil
}
