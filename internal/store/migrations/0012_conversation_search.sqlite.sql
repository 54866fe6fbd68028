-- The text the conversation search looks through: titles (key 'title'),
-- the user's messages and the assistant's final replies, one row each, key
-- unique per conversation so that a text is indexed once however often it
-- is given. id is the rowid (INTEGER PRIMARY KEY), so that VACUUM keeps it
-- and the FTS5 index below can name rows by it.
CREATE TABLE conversation_texts (
    id              INTEGER NOT NULL PRIMARY KEY,
    conversation_id TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    at              BIGINT  NOT NULL,
    UNIQUE (conversation_id, key)
);
-- A contentless FTS5 index (the text is in conversation_texts, not kept
-- twice) whose rows can be deleted, for titles that change. unicode61
-- folds case and diacritics.
CREATE VIRTUAL TABLE conversation_texts_fts USING fts5(body, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2');
INSERT INTO conversation_texts (conversation_id, key, kind, body, at)
    SELECT id, 'title', 'title', title, created_at FROM conversations WHERE title <> '';
INSERT INTO conversation_texts_fts (rowid, body) SELECT id, body FROM conversation_texts;
