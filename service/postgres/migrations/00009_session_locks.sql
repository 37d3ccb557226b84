-- A session's writes no longer lock its row, and its log is no longer tied to it by a
-- foreign key. Every append already checks, under the session's write lock (an advisory
-- lock per session, taken by every write of the session; see qLockSessions), that the
-- session exists, and a session's events are deleted with it by the same write (Append's
-- deletion). The row lock wrote to the session's page and the WAL on every round; the
-- key's check cost a query and a row lock per event appended, the most frequent row of
-- all.
--
-- epoch is the mark of the store that wrote the session last (see tails.go): a store
-- that finds its own mark knows where the log ends without reading it.

-- +goose Up
ALTER TABLE events DROP CONSTRAINT events_session_id_fkey;
ALTER TABLE sessions ADD COLUMN epoch bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE sessions DROP COLUMN epoch;
DELETE FROM events e WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = e.session_id);
ALTER TABLE events ADD CONSTRAINT events_session_id_fkey
	FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE;
