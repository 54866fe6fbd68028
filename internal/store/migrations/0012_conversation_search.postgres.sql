-- The text the conversation search looks through: titles (key 'title'),
-- the user's messages and the assistant's final replies, one row each, key
-- unique per conversation so that a text is indexed once however often it
-- is given.
CREATE TABLE conversation_texts (
    conversation_id TEXT   NOT NULL,
    key             TEXT   NOT NULL,
    kind            TEXT   NOT NULL,
    body            TEXT   NOT NULL,
    at              BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
-- Full-text search by a GIN index on the 'simple' configuration's
-- tsvector (lower case, no stemming, no stop words: the texts are in any
-- language); a query must use this very expression to use the index.
CREATE INDEX conversation_texts_search ON conversation_texts USING GIN (to_tsvector('simple', body));
INSERT INTO conversation_texts (conversation_id, key, kind, body, at)
    SELECT id, 'title', 'title', title, created_at FROM conversations WHERE title <> '';
