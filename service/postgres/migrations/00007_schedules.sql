-- On its own time, within limits: what models spend and the caps on it, and schedules.
--
-- * A run waiting for a token budget says which cap it waits on (runs.budget).
-- * session_usage and user_usage count the tokens runs reported, per session and per user
--   and period ('2026-05' or '2026-05-04'); usage_holds are the reservations of model calls
--   under way, each until its call reports or its time runs out (service.UsageStore).
--   Reservations of one user are made under an advisory lock of theirs (key 1950810115),
--   and read the usage and the holds in one statement.
-- * A schedule is a row; each of its instants, fired or skipped, is a row of
--   schedule_fires, unique by (schedule_id, slot): the exactly-once point. The due index
--   holds the enabled schedules by when they are next due; pending fires (outcome '') by
--   when they were last taken. Times are bigint nanoseconds, as elsewhere.

-- +goose Up
ALTER TABLE runs ADD COLUMN budget text COLLATE "C" NOT NULL DEFAULT '';

CREATE TABLE session_usage (
	session_id    text COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	input_tokens  bigint NOT NULL,
	output_tokens bigint NOT NULL
);

CREATE TABLE user_usage (
	user_id       text COLLATE "C" NOT NULL,
	period        text COLLATE "C" NOT NULL,
	input_tokens  bigint NOT NULL,
	output_tokens bigint NOT NULL,
	PRIMARY KEY (user_id, period)
);

CREATE TABLE usage_holds (
	id         text COLLATE "C" PRIMARY KEY,
	session_id text COLLATE "C" NOT NULL,
	user_id    text COLLATE "C" NOT NULL,
	period     text COLLATE "C" NOT NULL,
	tokens     bigint NOT NULL,
	until      bigint NOT NULL
);
CREATE INDEX usage_holds_by_session ON usage_holds (session_id);
CREATE INDEX usage_holds_by_user ON usage_holds (user_id, period);

CREATE TABLE schedules (
	id              text COLLATE "C" PRIMARY KEY,
	user_id         text COLLATE "C" NOT NULL,
	guest           boolean NOT NULL,
	content         bytea NOT NULL,
	session_id      text COLLATE "C" NOT NULL,
	title           bytea NOT NULL,
	settings        text, -- JSON of service.SettingsInput; NULL for none
	cron            text NOT NULL,
	at              bigint,
	timezone        text NOT NULL,
	overlap         text COLLATE "C" NOT NULL,
	catch_up        text COLLATE "C" NOT NULL,
	end_at          bigint,
	max_fires       integer,
	enabled         boolean NOT NULL,
	disabled_reason bytea NOT NULL,
	created_at      bigint NOT NULL,
	updated_at      bigint NOT NULL,
	fires           integer NOT NULL,
	checked         bigint NOT NULL,
	next_at         bigint,
	version         bigint NOT NULL
);
CREATE INDEX schedules_by_user ON schedules (user_id, created_at, id);
CREATE INDEX schedules_due ON schedules (next_at, id) WHERE enabled AND next_at IS NOT NULL;

CREATE TABLE schedule_fires (
	id           text COLLATE "C" PRIMARY KEY,
	schedule_id  text COLLATE "C" NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
	user_id      text COLLATE "C" NOT NULL,
	slot         text COLLATE "C" NOT NULL,
	scheduled_at bigint NOT NULL,
	attempt      bigint NOT NULL,
	fired_at     bigint,
	outcome      text COLLATE "C" NOT NULL,
	reason       bytea NOT NULL,
	session_id   text COLLATE "C" NOT NULL,
	run_id       text COLLATE "C" NOT NULL,
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
