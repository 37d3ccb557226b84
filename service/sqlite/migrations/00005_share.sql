-- Share links: a capability to read one branch of a session without signing in. The
-- token is never stored, only its SHA-256 (hash), by which a read finds the link. A link
-- goes with its session. snapshot is the JSON of service.ShareSnapshot (NULL for a live
-- link); views count reads, apart from what a batch writes.

-- +goose Up
CREATE TABLE share_links (
	id            TEXT PRIMARY KEY,
	session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	hash          BLOB NOT NULL UNIQUE,
	live          INTEGER NOT NULL,
	include_tools INTEGER NOT NULL,
	expires_at    TEXT,
	revoked_at    TEXT,
	created_at    TEXT NOT NULL,
	views         INTEGER NOT NULL DEFAULT 0,
	snapshot      TEXT
);
CREATE INDEX share_links_by_session ON share_links (session_id, created_at, id);

-- +goose Down
DROP TABLE share_links;
