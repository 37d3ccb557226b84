-- Away from the keyboard: whether a session has news its user has not read, each user's
-- viewer log, their webhooks (the signing secrets sealed by the server) and the webhooks'
-- deliveries, an outbox written with the change each tells of, with the lease of the
-- replica attempting it.
--
-- A user's viewer events are numbered by a counter row of theirs (viewer_seqs), updated in
-- the transaction that writes the events: its row lock makes the next transaction of the
-- same user wait for this one's end, so that numbers follow the order of commits with no
-- gap (a sequence would hand out numbers in the order transactions ask, not commit). It
-- also keeps where the numbering is when pruning has deleted every event of a user.

-- +goose Up
ALTER TABLE sessions ADD COLUMN unread boolean NOT NULL DEFAULT false;

CREATE TABLE viewer_seqs (
	user_id text COLLATE "C" PRIMARY KEY,
	seq     bigint NOT NULL
);

CREATE TABLE viewer_events (
	user_id text COLLATE "C" NOT NULL,
	seq     bigint NOT NULL,
	at      bigint NOT NULL,
	payload text NOT NULL, -- JSON of service.ViewerEvent
	PRIMARY KEY (user_id, seq)
);
CREATE INDEX viewer_events_by_time ON viewer_events (at);

CREATE TABLE webhooks (
	id              text COLLATE "C" PRIMARY KEY,
	user_id         text COLLATE "C" NOT NULL,
	url             bytea NOT NULL,
	events          text[] COLLATE "C" NOT NULL,
	enabled         boolean NOT NULL,
	disabled_reason bytea NOT NULL,
	description     bytea NOT NULL,
	created_at      bigint NOT NULL,
	secret          bytea NOT NULL,
	previous_secret bytea,
	previous_until  bigint,
	failures        integer NOT NULL DEFAULT 0
);
CREATE INDEX webhooks_by_user ON webhooks (user_id, created_at, id);

CREATE TABLE webhook_deliveries (
	id               text COLLATE "C" PRIMARY KEY,
	webhook_id       text COLLATE "C" NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
	user_id          text COLLATE "C" NOT NULL,
	event_id         text COLLATE "C" NOT NULL,
	type             text COLLATE "C" NOT NULL,
	payload          text NOT NULL,
	status           text COLLATE "C" NOT NULL,
	attempts         integer NOT NULL DEFAULT 0,
	last_status_code integer NOT NULL DEFAULT 0,
	last_error       bytea NOT NULL DEFAULT '',
	next_attempt_at  bigint,
	created_at       bigint NOT NULL,
	delivered_at     bigint,
	once             boolean NOT NULL DEFAULT false,
	lease_owner      text COLLATE "C" NOT NULL DEFAULT '',
	lease_until      bigint
);
CREATE INDEX deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at, id);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
DROP TABLE viewer_events;
DROP TABLE viewer_seqs;
ALTER TABLE sessions DROP COLUMN unread;
