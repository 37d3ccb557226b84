-- Share links: a capability to read one branch of a session without signing in. The
-- token is never stored, only its SHA-256 (hash), by which a read finds the link. A link
-- goes with its session. Times are nanoseconds since the Unix epoch, as elsewhere;
-- snapshot is the JSON of service.ShareSnapshot (NULL for a live link); views count
-- reads, apart from what a batch writes.

-- +goose Up
CREATE TABLE share_links (
	id            text COLLATE "C" PRIMARY KEY,
	session_id    text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	hash          bytea NOT NULL UNIQUE,
	live          boolean NOT NULL,
	include_tools boolean NOT NULL,
	expires_at    bigint,
	revoked_at    bigint,
	created_at    bigint NOT NULL,
	views         bigint NOT NULL DEFAULT 0,
	snapshot      jsonb
);
CREATE INDEX share_links_by_session ON share_links (session_id, created_at, id);

-- +goose Down
DROP TABLE share_links;
