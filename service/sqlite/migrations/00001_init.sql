-- The first schema. Times are TEXT in one fixed-width UTC layout with nanoseconds
-- (2006-01-02T15:04:05.000000000Z), so they round-trip exactly and sort as they compare.
-- Every row of a session refers to it with ON DELETE CASCADE: deleting the session row
-- deletes everything that belongs to it.

-- +goose Up
CREATE TABLE sessions (
	id         TEXT PRIMARY KEY,
	user_id    TEXT NOT NULL,
	title      TEXT NOT NULL,
	settings   TEXT NOT NULL, -- JSON of service.Settings
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL,
	last_seq   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_activity ON sessions (user_id, updated_at, id);

CREATE TABLE messages (
	id          TEXT PRIMARY KEY,
	session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq         INTEGER NOT NULL,
	role        TEXT NOT NULL,
	kind        TEXT NOT NULL,
	content     TEXT NOT NULL,
	status      TEXT NOT NULL,
	run_id      TEXT NOT NULL,
	question_id TEXT NOT NULL,
	created_at  TEXT NOT NULL
);
CREATE INDEX messages_by_seq ON messages (session_id, seq, id);

CREATE TABLE runs (
	id          TEXT PRIMARY KEY,
	session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	user_id     TEXT NOT NULL,
	status      TEXT NOT NULL,
	error       TEXT NOT NULL,
	agent       TEXT NOT NULL,
	created_at  TEXT NOT NULL,
	started_at  TEXT,
	finished_at TEXT
);
CREATE INDEX runs_by_status ON runs (status, created_at, id);
CREATE INDEX runs_by_session ON runs (session_id);

CREATE TABLE questions (
	id          TEXT PRIMARY KEY,
	run_id      TEXT NOT NULL,
	session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	prompt      TEXT NOT NULL,
	choices     TEXT, -- JSON array; NULL for a free answer
	answer      TEXT,
	asked_at    TEXT NOT NULL,
	answered_at TEXT,
	withdrawn   INTEGER NOT NULL
);
CREATE INDEX questions_by_session ON questions (session_id);

CREATE TABLE tool_calls (
	id          TEXT PRIMARY KEY,
	run_id      TEXT NOT NULL,
	session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	message_id  TEXT NOT NULL,
	name        TEXT NOT NULL,
	arguments   TEXT NOT NULL,
	output      TEXT NOT NULL,
	result      TEXT,
	error       TEXT,
	status      TEXT NOT NULL,
	started_at  TEXT NOT NULL,
	finished_at TEXT
);
CREATE INDEX tool_calls_by_message ON tool_calls (message_id, started_at, id);
CREATE INDEX tool_calls_by_session ON tool_calls (session_id);

-- events is each session's log. The payload columns hold JSON snapshots of the rows as
-- they were when the event was appended.
CREATE TABLE events (
	session_id     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq            INTEGER NOT NULL,
	type           TEXT NOT NULL,
	at             TEXT NOT NULL,
	key            TEXT NOT NULL,
	message_id     TEXT NOT NULL,
	delta          TEXT NOT NULL,
	delta_offset   INTEGER NOT NULL,
	coalesced_from INTEGER NOT NULL,
	message        TEXT,
	run            TEXT,
	question       TEXT,
	tool_call      TEXT,
	session        TEXT,
	PRIMARY KEY (session_id, seq)
);

CREATE TABLE idempotency (
	user_id    TEXT NOT NULL,
	idem_key   TEXT NOT NULL,
	session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	message_id TEXT NOT NULL,
	run_id     TEXT NOT NULL,
	created_at TEXT NOT NULL,
	PRIMARY KEY (user_id, idem_key)
);
CREATE INDEX idempotency_by_session ON idempotency (session_id);

-- meta holds the server's own values, such as its token signing secret.
CREATE TABLE meta (
	name  TEXT PRIMARY KEY,
	value BLOB NOT NULL
);

-- +goose Down
DROP TABLE meta;
DROP TABLE idempotency;
DROP TABLE events;
DROP TABLE tool_calls;
DROP TABLE questions;
DROP TABLE runs;
DROP TABLE messages;
DROP TABLE sessions;
