package controlplane

import (
	"net/http"
	"time"

	"github.com/talkide/platform/internal/httpapi"
	"github.com/talkide/platform/internal/store"
)

// UsageView is one model call of a conversation as the browser API shows
// it.
type UsageView struct {
	Model                    string    `json:"model"`
	Status                   int       `json:"status"`
	InputTokens              int64     `json:"input_tokens"`
	OutputTokens             int64     `json:"output_tokens"`
	CacheCreationInputTokens int64     `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64     `json:"cache_read_input_tokens"`
	StartedAt                time.Time `json:"started_at"`
	DurationMS               int64     `json:"duration_ms"`
	// Purpose is "title" for the call that named the conversation; absent
	// for the agent's own calls.
	Purpose string `json:"purpose,omitempty"`
}

// handleConversationUsage is GET /api/conversations/{id}/usage: the
// conversation's model calls, oldest first, to whoever may see it.
func (s *Server) handleConversationUsage(w http.ResponseWriter, r *http.Request) error {
	c, err := s.conversation(r)
	if err != nil {
		return err
	}
	us, err := s.cfg.Store.ListUsage(r.Context(), c.ID)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"usage": views(us, usageView)})
	return nil
}

func usageView(u store.UsageRecord) UsageView {
	return UsageView{Model: u.Model, Status: u.Status, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens,
		StartedAt: u.StartedAt, DurationMS: u.Duration.Milliseconds(), Purpose: u.Purpose}
}
