-- The log is the truth: a session's last sequence number is the Seq of its last event, so
-- the sessions row no longer keeps a copy that every append would have to update. Also: why
-- a failed message failed, what a run cost in its model's tokens, the agent's own ID for a
-- tool call (a model's tool_call_id, given back to it with the history), which replica runs
-- a run, and what a session weighs against its user's storage quota.

-- +goose Up
ALTER TABLE sessions DROP COLUMN last_seq;
ALTER TABLE messages ADD COLUMN error TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN usage TEXT; -- JSON of service.Usage; NULL when none was reported
ALTER TABLE tool_calls ADD COLUMN call_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0; -- its weight against its user's quota
CREATE INDEX questions_by_run ON questions (run_id);
CREATE INDEX runs_by_user ON runs (user_id, status);

-- +goose Down
DROP INDEX runs_by_user;
DROP INDEX questions_by_run;
ALTER TABLE runs DROP COLUMN owner;
ALTER TABLE sessions DROP COLUMN bytes;
ALTER TABLE tool_calls DROP COLUMN call_id;
ALTER TABLE runs DROP COLUMN usage;
ALTER TABLE messages DROP COLUMN error;
ALTER TABLE sessions ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET last_seq = coalesce((SELECT max(seq) FROM events WHERE events.session_id = sessions.id), 0);
