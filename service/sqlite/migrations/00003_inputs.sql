-- Human in the loop: a question may take several of its choices or an answer of a given
-- shape, and expires; it may answer a tool call (an agent's ask_user); one withdrawn says
-- why. A tool call may wait for the user's approval, which is kept whole as JSON.

-- +goose Up
ALTER TABLE questions ADD COLUMN multiple INTEGER NOT NULL DEFAULT 0;
ALTER TABLE questions ADD COLUMN answer_schema TEXT NOT NULL DEFAULT '';
ALTER TABLE questions ADD COLUMN expires_at TEXT;
ALTER TABLE questions ADD COLUMN withdrawn_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE questions ADD COLUMN tool_call_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tool_calls ADD COLUMN approval TEXT; -- JSON of service.ToolApproval; NULL when none was needed

-- +goose Down
ALTER TABLE tool_calls DROP COLUMN approval;
ALTER TABLE questions DROP COLUMN tool_call_id;
ALTER TABLE questions DROP COLUMN withdrawn_reason;
ALTER TABLE questions DROP COLUMN expires_at;
ALTER TABLE questions DROP COLUMN answer_schema;
ALTER TABLE questions DROP COLUMN multiple;
