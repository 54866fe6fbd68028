-- The conversation list is ordered by last activity: a message sent or a
-- turn that ended moves a conversation to the top. A conversation from
-- before starts at its creation.
ALTER TABLE conversations ADD COLUMN last_activity_at BIGINT NOT NULL DEFAULT 0;
UPDATE conversations SET last_activity_at = created_at;
CREATE INDEX conversations_user_activity ON conversations (user_id, last_activity_at);
-- What a model call was for: '' for the agent's own calls, 'title' for the
-- call that names a new conversation, so that the user sees it as such.
ALTER TABLE usage_records ADD COLUMN purpose TEXT NOT NULL DEFAULT '';
