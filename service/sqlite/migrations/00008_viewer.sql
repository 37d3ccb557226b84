-- Away from the keyboard: whether a session has news its user has not read, each user's
-- viewer log (what all their sessions did, numbered per user with no gap by the store, the
-- file's one writer, after the user's last event, which pruning always keeps), their
-- webhooks (the signing secrets sealed by the server) and the webhooks' deliveries, an
-- outbox written with the change each tells of, with the lease of the process attempting
-- it.

-- +goose Up
ALTER TABLE sessions ADD COLUMN unread INTEGER NOT NULL DEFAULT 0;

CREATE TABLE viewer_events (
	user_id TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	at      TEXT NOT NULL,
	payload TEXT NOT NULL, -- JSON of service.ViewerEvent
	PRIMARY KEY (user_id, seq)
);
CREATE INDEX viewer_events_by_time ON viewer_events (at);

CREATE TABLE webhooks (
	id              TEXT PRIMARY KEY,
	user_id         TEXT NOT NULL,
	url             TEXT NOT NULL,
	events          TEXT NOT NULL, -- JSON array of event types
	enabled         INTEGER NOT NULL,
	disabled_reason TEXT NOT NULL DEFAULT '',
	description     TEXT NOT NULL DEFAULT '',
	created_at      TEXT NOT NULL,
	secret          BLOB NOT NULL,
	previous_secret BLOB,
	previous_until  TEXT,
	failures        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX webhooks_by_user ON webhooks (user_id, created_at, id);

CREATE TABLE webhook_deliveries (
	id               TEXT PRIMARY KEY,
	webhook_id       TEXT NOT NULL,
	user_id          TEXT NOT NULL,
	event_id         TEXT NOT NULL,
	type             TEXT NOT NULL,
	payload          TEXT NOT NULL,
	status           TEXT NOT NULL,
	attempts         INTEGER NOT NULL DEFAULT 0,
	last_status_code INTEGER NOT NULL DEFAULT 0,
	last_error       TEXT NOT NULL DEFAULT '',
	next_attempt_at  TEXT,
	created_at       TEXT NOT NULL,
	delivered_at     TEXT,
	once             INTEGER NOT NULL DEFAULT 0,
	lease_owner      TEXT NOT NULL DEFAULT '',
	lease_until      TEXT
);
CREATE INDEX deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at, id);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
DROP TABLE viewer_events;
ALTER TABLE sessions DROP COLUMN unread;
