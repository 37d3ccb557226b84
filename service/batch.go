package service

import "fmt"

// Check reports what is wrong with b on its face, without the stored state: a missing
// session ID, rows of another session, rows without IDs, nil rows, a Delete that writes
// anything else, a Seq both rewritten and dropped. Such mistakes are the caller's bugs;
// every Store checks them before it writes anything.
func (b *Batch) Check() error {
	if b.SessionID == "" {
		return fmt.Errorf("batch: batch without a session ID")
	}
	bad := func(what, id, sessionID string) error {
		if id == "" {
			return fmt.Errorf("batch: %s without an ID", what)
		}
		if sessionID != b.SessionID {
			return fmt.Errorf("batch: %s %s of session %q in a batch for session %s", what, id, sessionID, b.SessionID)
		}
		return nil
	}
	if b.Delete {
		if b.Session != nil || len(b.Messages)+len(b.Runs)+len(b.Questions)+len(b.ToolCalls)+
			len(b.Events)+len(b.Rewrite)+len(b.DropEvents) > 0 || b.Idempotency != nil {
			return fmt.Errorf("batch: a batch that deletes session %s must write nothing else", b.SessionID)
		}
		return nil
	}
	if b.Session != nil {
		if err := bad("session", b.Session.ID, b.Session.ID); err != nil {
			return err
		}
		if b.Session.ID != b.SessionID {
			return fmt.Errorf("batch: session %s in a batch for session %s", b.Session.ID, b.SessionID)
		}
	}
	for _, m := range b.Messages {
		if m == nil {
			return fmt.Errorf("batch: nil message")
		}
		if err := bad("message", m.ID, m.SessionID); err != nil {
			return err
		}
	}
	for _, r := range b.Runs {
		if r == nil {
			return fmt.Errorf("batch: nil run")
		}
		if err := bad("run", r.ID, r.SessionID); err != nil {
			return err
		}
	}
	for _, q := range b.Questions {
		if q == nil {
			return fmt.Errorf("batch: nil question")
		}
		if err := bad("question", q.ID, q.SessionID); err != nil {
			return err
		}
	}
	for _, tc := range b.ToolCalls {
		if tc == nil {
			return fmt.Errorf("batch: nil tool call")
		}
		if err := bad("tool call", tc.ID, tc.SessionID); err != nil {
			return err
		}
	}
	for _, e := range b.Events {
		if e == nil {
			return fmt.Errorf("batch: nil event")
		}
		if e.SessionID != "" && e.SessionID != b.SessionID {
			return fmt.Errorf("batch: event of session %s in a batch for session %s", e.SessionID, b.SessionID)
		}
	}
	dropped := make(map[int64]bool, len(b.DropEvents))
	for _, seq := range b.DropEvents {
		dropped[seq] = true
	}
	rewritten := make(map[int64]bool, len(b.Rewrite))
	for _, e := range b.Rewrite {
		if e == nil {
			return fmt.Errorf("batch: nil event to rewrite")
		}
		if e.SessionID != "" && e.SessionID != b.SessionID {
			return fmt.Errorf("batch: rewrite of an event of session %s in a batch for session %s", e.SessionID, b.SessionID)
		}
		if e.Seq < 1 || dropped[e.Seq] || rewritten[e.Seq] {
			return fmt.Errorf("batch: rewrite of event %d: no such sequence number, or also dropped or rewritten", e.Seq)
		}
		rewritten[e.Seq] = true
	}
	if r := b.Idempotency; r != nil {
		if r.UserID == "" || r.Key == "" {
			return fmt.Errorf("batch: idempotency record without a user or key")
		}
		if r.SessionID != b.SessionID {
			return fmt.Errorf("batch: idempotency record of session %s in a batch for session %s", r.SessionID, b.SessionID)
		}
	}
	return nil
}
