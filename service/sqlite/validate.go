package sqlite

import (
	"fmt"

	"github.com/talkgraph/talkgraph/service"
)

// validate checks what can be checked of b without the stored state: mistakes in it are
// the caller's bugs.
func validate(b *service.Batch) error {
	if b.SessionID == "" {
		return fmt.Errorf("sqlite: apply: batch without a session ID")
	}
	bad := func(what, id, sessionID string) error {
		if id == "" {
			return fmt.Errorf("sqlite: apply: %s without an ID", what)
		}
		if sessionID != b.SessionID {
			return fmt.Errorf("sqlite: apply: %s %s of session %q in a batch for session %s", what, id, sessionID, b.SessionID)
		}
		return nil
	}
	if b.Delete {
		if b.Session != nil || len(b.Messages)+len(b.Runs)+len(b.Questions)+len(b.ToolCalls)+
			len(b.Events)+len(b.Rewrite)+len(b.DropEvents) > 0 || b.Idempotency != nil {
			return fmt.Errorf("sqlite: apply: a batch that deletes session %s must write nothing else", b.SessionID)
		}
		return nil
	}
	if b.Session != nil {
		if err := bad("session", b.Session.ID, b.Session.ID); err != nil {
			return err
		}
		if b.Session.ID != b.SessionID {
			return fmt.Errorf("sqlite: apply: session %s in a batch for session %s", b.Session.ID, b.SessionID)
		}
	}
	for _, m := range b.Messages {
		if m == nil {
			return fmt.Errorf("sqlite: apply: nil message")
		}
		if err := bad("message", m.ID, m.SessionID); err != nil {
			return err
		}
	}
	for _, r := range b.Runs {
		if r == nil {
			return fmt.Errorf("sqlite: apply: nil run")
		}
		if err := bad("run", r.ID, r.SessionID); err != nil {
			return err
		}
	}
	for _, q := range b.Questions {
		if q == nil {
			return fmt.Errorf("sqlite: apply: nil question")
		}
		if err := bad("question", q.ID, q.SessionID); err != nil {
			return err
		}
	}
	for _, tc := range b.ToolCalls {
		if tc == nil {
			return fmt.Errorf("sqlite: apply: nil tool call")
		}
		if err := bad("tool call", tc.ID, tc.SessionID); err != nil {
			return err
		}
	}
	for _, e := range b.Events {
		if e == nil {
			return fmt.Errorf("sqlite: apply: nil event")
		}
		if e.SessionID != "" && e.SessionID != b.SessionID {
			return fmt.Errorf("sqlite: apply: event of session %s in a batch for session %s", e.SessionID, b.SessionID)
		}
	}
	dropped := make(map[int64]bool, len(b.DropEvents))
	for _, seq := range b.DropEvents {
		dropped[seq] = true
	}
	rewritten := make(map[int64]bool, len(b.Rewrite))
	for _, e := range b.Rewrite {
		if e == nil {
			return fmt.Errorf("sqlite: apply: nil event to rewrite")
		}
		if e.SessionID != "" && e.SessionID != b.SessionID {
			return fmt.Errorf("sqlite: apply: rewrite of an event of session %s in a batch for session %s", e.SessionID, b.SessionID)
		}
		if e.Seq < 1 || dropped[e.Seq] || rewritten[e.Seq] {
			return fmt.Errorf("sqlite: apply: rewrite of event %d: no such sequence number, or also dropped or rewritten", e.Seq)
		}
		rewritten[e.Seq] = true
	}
	if r := b.Idempotency; r != nil {
		if r.UserID == "" || r.Key == "" {
			return fmt.Errorf("sqlite: apply: idempotency record without a user or key")
		}
		if r.SessionID != b.SessionID {
			return fmt.Errorf("sqlite: apply: idempotency record of session %s in a batch for session %s", r.SessionID, b.SessionID)
		}
	}
	return nil
}
