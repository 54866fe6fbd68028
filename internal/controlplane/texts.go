package controlplane

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/talkide/platform/internal/contract"
	"github.com/talkide/platform/internal/store"
)

// What makes a conversation findable: its last activity, which orders the
// list, and the texts the search looks through. The control-plane learns
// both from the two things it sees of every conversation, whether or not a
// browser watches it: the messages it forwards (handleSend) and the
// turn_ended report the worker sends at the end of every turn, with the
// main agent's text of it. A message is indexed under its client message
// id and a reply under its turn id, so a message retried or a report batch
// sent again is indexed once. Tool inputs and outputs are never indexed:
// the worker's report does not carry them.

// indexWrite bounds the store writes that follow a message the worker
// already took: they must not hold the browser's answer for long.
const indexWrite = 5 * time.Second

// maxIndexedText bounds the bytes of one text the search indexes: a pasted
// log's first 16 KiB say what it is about.
const maxIndexedText = contract.MaxReplyText

// messageSent notes a message the worker took for conversation c: the
// conversation's activity, its text for the search, and, for a
// conversation without a title, a request for one. A failure is logged,
// not returned: the message was sent.
func (s *Server) messageSent(ctx context.Context, c store.Conversation, msg contract.SendMessageRequest) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), indexWrite)
	defer cancel()
	now := s.cfg.Now().UTC()
	if err := s.cfg.Store.TouchConversation(ctx, c.ID, now); err != nil {
		s.log.Warn("conversation activity not recorded", "conversation", c.ID, "err", err)
	}
	x := store.ConversationText{ConversationID: c.ID, Key: "m/" + msg.ClientMessageID, Kind: store.TextUser, Body: cut(msg.Text, maxIndexedText), At: now}
	if _, err := s.cfg.Store.AddConversationText(ctx, x); err != nil {
		s.log.Warn("message not indexed for search", "conversation", c.ID, "err", err)
	}
	if c.Title == "" {
		s.titles.request(ctx, c, msg.Text)
	}
}

// turnEnded records a turn_ended report of a conversation the reporting
// worker owns: the reply for the search, and the activity at the report's
// time (never later than now). An error fails the batch, which the worker
// sends again; both writes are idempotent.
func (s *Server) turnEnded(ctx context.Context, r contract.Report) error {
	if r.Reply != nil && r.Reply.Text != "" {
		x := store.ConversationText{ConversationID: r.ConversationID, Key: "t/" + r.TurnID, Kind: store.TextAssistant,
			Body: cut(r.Reply.Text, maxIndexedText), At: r.Time}
		if _, err := s.cfg.Store.AddConversationText(ctx, x); err != nil {
			return err
		}
	}
	at := r.Time
	if now := s.cfg.Now(); at.After(now) {
		at = now
	}
	return s.cfg.Store.TouchConversation(ctx, r.ConversationID, at)
}

// cut returns s's first max bytes at most, cut at a character boundary.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max]
}
