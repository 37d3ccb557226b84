-- On its own time, within limits: what models spend and the caps on it, and schedules.
--
-- * A run waiting for a token budget says which cap it waits on (runs.budget).
-- * session_usage and user_usage count the tokens runs reported, per session and per user
--   and period ('2026-05' or '2026-05-04'); usage_holds are the reservations of model calls
--   under way, each until its call reports or its time runs out (service.UsageStore).
-- * A schedule is a row; each of its instants, fired or skipped, is a row of
--   schedule_fires, unique by (schedule_id, slot): the exactly-once point. The due index
--   holds the enabled schedules by when they are next due; pending fires (outcome '') by
--   when they were last taken.

-- +goose Up
ALTER TABLE runs ADD COLUMN budget TEXT NOT NULL DEFAULT '';

CREATE TABLE session_usage (
	session_id    TEXT PRIMARY KEY,
	input_tokens  INTEGER NOT NULL,
	output_tokens INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE user_usage (
	user_id       TEXT NOT NULL,
	period        TEXT NOT NULL,
	input_tokens  INTEGER NOT NULL,
	output_tokens INTEGER NOT NULL,
	PRIMARY KEY (user_id, period)
) WITHOUT ROWID;

CREATE TABLE usage_holds (
	id         TEXT PRIMARY KEY,
	session_id TEXT NOT NULL,
	user_id    TEXT NOT NULL,
	period     TEXT NOT NULL,
	tokens     INTEGER NOT NULL,
	until      TEXT NOT NULL
);
CREATE INDEX usage_holds_by_session ON usage_holds (session_id);
CREATE INDEX usage_holds_by_user ON usage_holds (user_id, period);

CREATE TABLE schedules (
	id              TEXT PRIMARY KEY,
	user_id         TEXT NOT NULL,
	guest           INTEGER NOT NULL,
	content         TEXT NOT NULL,
	session_id      TEXT NOT NULL,
	title           TEXT NOT NULL,
	settings        TEXT, -- JSON of service.SettingsInput; NULL for none
	cron            TEXT NOT NULL,
	at              TEXT,
	timezone        TEXT NOT NULL,
	overlap         TEXT NOT NULL,
	catch_up        TEXT NOT NULL,
	end_at          TEXT,
	max_fires       INTEGER,
	enabled         INTEGER NOT NULL,
	disabled_reason TEXT NOT NULL,
	created_at      TEXT NOT NULL,
	updated_at      TEXT NOT NULL,
	fires           INTEGER NOT NULL,
	checked         TEXT NOT NULL,
	next_at         TEXT,
	version         INTEGER NOT NULL
);
CREATE INDEX schedules_by_user ON schedules (user_id, created_at, id);
CREATE INDEX schedules_due ON schedules (next_at, id) WHERE enabled = 1 AND next_at IS NOT NULL;

CREATE TABLE schedule_fires (
	id           TEXT PRIMARY KEY,
	schedule_id  TEXT NOT NULL,
	user_id      TEXT NOT NULL,
	slot         TEXT NOT NULL,
	scheduled_at TEXT NOT NULL,
	attempt      TEXT NOT NULL,
	fired_at     TEXT,
	outcome      TEXT NOT NULL,
	reason       TEXT NOT NULL,
	session_id   TEXT NOT NULL,
	run_id       TEXT NOT NULL,
	UNIQUE (schedule_id, slot)
);
CREATE INDEX schedule_fires_newest ON schedule_fires (schedule_id, scheduled_at, id);
CREATE INDEX schedule_fires_pending ON schedule_fires (attempt, id) WHERE outcome = '';

-- +goose Down
DROP TABLE schedule_fires;
DROP TABLE schedules;
DROP TABLE usage_holds;
DROP TABLE user_usage;
DROP TABLE session_usage;
ALTER TABLE runs DROP COLUMN budget;
