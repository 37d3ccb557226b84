-- The schema for PostgreSQL. It keeps what SQLite's does, with these choices:
--
-- * Times are bigint nanoseconds since the Unix epoch (UTC): timestamptz keeps only
--   microseconds, and the store promises nanoseconds. The zero time.Time is stored as the
--   smallest bigint; times outside the years 1678–2262 are refused before they get here.
-- * Identifiers, user IDs and enumerations are text COLLATE "C", so that ordering by ID is
--   byte order, as in Go and SQLite, whatever the database's locale.
-- * Text that people and models write (titles, message content, deltas, tool arguments and
--   output, errors, prompts, answers) is bytea holding the UTF-8 bytes: PostgreSQL's text
--   cannot hold a NUL character, which a model may well produce, and a streamed reply must
--   never become impossible to store.
-- * Event payloads and settings are JSON kept as text, byte for byte as the store wrote
--   them (JSON escapes NUL).
-- * The log is the truth: a session's last Seq is max(seq) of its events (the primary key
--   (session_id, seq) answers that with one index probe); no copy is kept.
-- * Every row of a session refers to it with ON DELETE CASCADE.

-- +goose Up
CREATE TABLE sessions (
	id         text COLLATE "C" PRIMARY KEY,
	user_id    text COLLATE "C" NOT NULL,
	title      bytea NOT NULL,
	settings   text NOT NULL, -- JSON of service.Settings
	created_at bigint NOT NULL,
	updated_at bigint NOT NULL,
	bytes      bigint NOT NULL DEFAULT 0 -- its weight against its user's quota (service.Store.Footprint)
);
CREATE INDEX sessions_by_activity ON sessions (user_id, updated_at, id);

CREATE TABLE messages (
	id          text COLLATE "C" PRIMARY KEY,
	session_id  text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq         bigint NOT NULL,
	role        text COLLATE "C" NOT NULL,
	kind        text COLLATE "C" NOT NULL,
	content     bytea NOT NULL,
	status      text COLLATE "C" NOT NULL,
	run_id      text COLLATE "C" NOT NULL,
	question_id text COLLATE "C" NOT NULL,
	created_at  bigint NOT NULL,
	error       bytea NOT NULL
);
CREATE INDEX messages_by_seq ON messages (session_id, seq, id);

CREATE TABLE runs (
	id          text COLLATE "C" PRIMARY KEY,
	session_id  text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	user_id     text COLLATE "C" NOT NULL,
	status      text COLLATE "C" NOT NULL,
	error       bytea NOT NULL,
	agent       text COLLATE "C" NOT NULL,
	created_at  bigint NOT NULL,
	started_at  bigint,
	finished_at bigint,
	usage       text, -- JSON of service.Usage; NULL when none was reported
	owner       text COLLATE "C" NOT NULL -- the replica that runs it (service.Coordinator)
);
CREATE INDEX runs_by_status ON runs (status, created_at, id);
CREATE INDEX runs_by_session ON runs (session_id, created_at, id);
CREATE INDEX runs_by_user ON runs (user_id, status);

CREATE TABLE questions (
	id          text COLLATE "C" PRIMARY KEY,
	run_id      text COLLATE "C" NOT NULL,
	session_id  text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	prompt      bytea NOT NULL,
	choices     text, -- JSON array; NULL for a free answer
	answer      bytea,
	asked_at    bigint NOT NULL,
	answered_at bigint,
	withdrawn   boolean NOT NULL
);
CREATE INDEX questions_by_session ON questions (session_id);
CREATE INDEX questions_by_run ON questions (run_id);

CREATE TABLE tool_calls (
	id          text COLLATE "C" PRIMARY KEY,
	run_id      text COLLATE "C" NOT NULL,
	session_id  text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	message_id  text COLLATE "C" NOT NULL,
	name        bytea NOT NULL,
	arguments   bytea NOT NULL,
	output      bytea NOT NULL,
	result      bytea,
	error       bytea,
	status      text COLLATE "C" NOT NULL,
	started_at  bigint NOT NULL,
	finished_at bigint,
	call_id     bytea NOT NULL
);
CREATE INDEX tool_calls_by_message ON tool_calls (message_id, started_at, id);
CREATE INDEX tool_calls_by_session ON tool_calls (session_id);

-- events is each session's log. The payload columns hold JSON snapshots of the rows as
-- they were when the event was appended.
CREATE TABLE events (
	session_id     text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq            bigint NOT NULL,
	type           text COLLATE "C" NOT NULL,
	at             bigint NOT NULL,
	key            text COLLATE "C" NOT NULL,
	message_id     text COLLATE "C" NOT NULL,
	delta          bytea NOT NULL,
	delta_offset   bigint NOT NULL,
	coalesced_from bigint NOT NULL,
	message        text,
	run            text,
	question       text,
	tool_call      text,
	session        text,
	PRIMARY KEY (session_id, seq)
);

CREATE TABLE idempotency (
	user_id    text COLLATE "C" NOT NULL,
	idem_key   text COLLATE "C" NOT NULL,
	session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	message_id text COLLATE "C" NOT NULL,
	run_id     text COLLATE "C" NOT NULL,
	created_at bigint NOT NULL,
	PRIMARY KEY (user_id, idem_key)
);
CREATE INDEX idempotency_by_session ON idempotency (session_id);

-- meta holds the server's own values, such as its token signing secret.
CREATE TABLE meta (
	name  text COLLATE "C" PRIMARY KEY,
	value bytea NOT NULL
);

-- replicas are the servers sharing this database: each lives until its last heartbeat's
-- "until" (nanoseconds, like every time here).
CREATE TABLE replicas (
	id      text COLLATE "C" PRIMARY KEY,
	beat_at bigint NOT NULL,
	until   bigint NOT NULL
);

-- talkgraph_all_written fails the statement (and so the transaction) when a multi-row
-- upsert wrote fewer rows than it was given: a row that already belongs to another
-- session is left alone by the upsert's WHERE, and the batch that carried it must not be
-- committed without it. Append finds such rows before it writes; this catches the race
-- where another transaction inserts one meanwhile, and Append then tries again.
-- +goose StatementBegin
CREATE FUNCTION talkgraph_all_written(written bigint, expected bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
	IF written <> expected THEN
		RAISE EXCEPTION 'wrote % of % rows: a row belongs to another session', written, expected
			USING ERRCODE = 'TG001';
	END IF;
	RETURN written;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION talkgraph_all_written(bigint, bigint);
DROP TABLE replicas;
DROP TABLE meta;
DROP TABLE idempotency;
DROP TABLE events;
DROP TABLE tool_calls;
DROP TABLE questions;
DROP TABLE runs;
DROP TABLE messages;
DROP TABLE sessions;
