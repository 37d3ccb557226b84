-- Why a failed message failed, and what a run cost in its model's tokens.

-- +goose Up
ALTER TABLE messages ADD COLUMN error TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN usage TEXT; -- JSON of service.Usage; NULL when none was reported

-- +goose Down
ALTER TABLE runs DROP COLUMN usage;
ALTER TABLE messages DROP COLUMN error;
