-- The text the conversation search looks through: titles (key 'title'),
-- the user's messages and the assistant's final replies, one row each, key
-- unique per conversation so that a text is indexed once however often it
-- is given.
-- search is the body's tsvector in the 'simple' configuration (lower
-- case, no stemming, no stop words: the texts are in any language), kept
-- by the database, so that ranking a match does not parse its text again.
CREATE TABLE conversation_texts (
    conversation_id TEXT     NOT NULL,
    key             TEXT     NOT NULL,
    kind            TEXT     NOT NULL,
    body            TEXT     NOT NULL,
    at              BIGINT   NOT NULL,
    search          tsvector NOT NULL GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED,
    PRIMARY KEY (conversation_id, key)
);
-- fastupdate off: texts arrive one message or reply at a time, and a
-- pending list of recent entries, which every search scans whole until
-- a vacuum merges it, made searches after a burst of texts 20 times
-- slower (BenchmarkSearch).
CREATE INDEX conversation_texts_search ON conversation_texts USING GIN (search) WITH (fastupdate = off);
INSERT INTO conversation_texts (conversation_id, key, kind, body, at)
    SELECT id, 'title', 'title', title, created_at FROM conversations WHERE title <> '';
