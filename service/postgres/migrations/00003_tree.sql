-- The conversation as a tree: every message has a parent (the message before it on its
-- branch, '' for a first one) and is on the session's current branch or not; the current
-- branch is read as one range of the partial index messages_on_branch, however many
-- branches the session has. A history written before this is one line: each message's
-- parent is the message before it. A run may say which message its reply follows
-- (reply_to), and a BranchSelected event which messages left and joined the branch.

-- +goose Up
ALTER TABLE messages
	ADD COLUMN parent_id text COLLATE "C" NOT NULL DEFAULT '',
	ADD COLUMN on_branch boolean NOT NULL DEFAULT true;
UPDATE messages m SET parent_id = p.prev FROM (
	SELECT id, coalesce(lag(id) OVER (PARTITION BY session_id ORDER BY seq, id), '') AS prev FROM messages) p
	WHERE m.id = p.id AND p.prev <> '';
CREATE INDEX messages_on_branch ON messages (session_id, seq, id) WHERE on_branch;
CREATE INDEX messages_by_parent ON messages (session_id, parent_id, seq, id);
DROP INDEX messages_by_seq;
ALTER TABLE runs ADD COLUMN reply_to text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN branch text; -- JSON of service.BranchSwitch

-- +goose Down
ALTER TABLE events DROP COLUMN branch;
ALTER TABLE runs DROP COLUMN reply_to;
CREATE INDEX messages_by_seq ON messages (session_id, seq, id);
DROP INDEX messages_by_parent;
DROP INDEX messages_on_branch;
ALTER TABLE messages DROP COLUMN on_branch, DROP COLUMN parent_id;
