-- Human in the loop: a question may take several of its choices or an answer of a given
-- shape, and expires; it may answer a tool call (an agent's ask_user); one withdrawn says
-- why. A tool call may wait for the user's approval, which is kept whole as JSON.

-- +goose Up
ALTER TABLE questions
	ADD COLUMN multiple boolean NOT NULL DEFAULT false,
	ADD COLUMN answer_schema bytea NOT NULL DEFAULT ''::bytea,
	ADD COLUMN expires_at bigint,
	ADD COLUMN withdrawn_reason text NOT NULL DEFAULT '',
	ADD COLUMN tool_call_id text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE tool_calls ADD COLUMN approval text; -- JSON of service.ToolApproval; NULL when none was needed

-- +goose Down
ALTER TABLE tool_calls DROP COLUMN approval;
ALTER TABLE questions
	DROP COLUMN tool_call_id,
	DROP COLUMN withdrawn_reason,
	DROP COLUMN expires_at,
	DROP COLUMN answer_schema,
	DROP COLUMN multiple;
