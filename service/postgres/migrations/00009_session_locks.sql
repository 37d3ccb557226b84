-- A session's log is no longer tied to its row by a foreign key: every append already
-- checks, under the session's lock, that the session exists, and a session's events are
-- deleted with it by the same write (Append's deletion). The key's check cost a query
-- and a row lock per event appended, the most frequent row of all; the lock that stands
-- for it is an advisory lock per session, taken by every write of the session (see
-- qLockSessions), which writes nothing to the row.

-- +goose Up
ALTER TABLE events DROP CONSTRAINT events_session_id_fkey;

-- +goose Down
DELETE FROM events e WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = e.session_id);
ALTER TABLE events ADD CONSTRAINT events_session_id_fkey
	FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE;
