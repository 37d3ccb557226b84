package inmem

import (
	"context"
	"fmt"

	"github.com/talkgraph/talkgraph/service"
)

// Append implements service.Store. Each batch is checked against the stored state before
// any of it is written, so a refused batch writes nothing.
func (s *Store) Append(ctx context.Context, batches []*service.Batch) []error {
	errs := make([]error, len(batches))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range batches {
		if s.closed {
			errs[i] = errClosed()
			continue
		}
		ch, err := b.Derive()
		if err != nil {
			errs[i] = service.Errorf(service.EINVALID, "%v", err)
			continue
		}
		errs[i] = s.append(b, &ch)
	}
	return errs
}

// append checks and writes one batch; s.mu must be held.
func (s *Store) append(b *service.Batch, ch *service.Changes) error {
	sd := s.sessions[b.SessionID]
	switch {
	case sd == nil && b.Create == nil:
		return service.Errorf(service.ENOTFOUND, "session %s not found", b.SessionID)
	case sd != nil && b.Create != nil:
		return service.Errorf(service.ECONFLICT, "session %s already exists", b.SessionID)
	}
	if b.Delete {
		s.deleteSession(sd)
		return s.tell(ch)
	}
	var last int64
	if sd != nil {
		last = sd.lastSeq()
	}
	if prev := b.PrevSeq(); len(b.Events) > 0 && prev != last {
		return fmt.Errorf("inmem: events follow %d, but the session's log ends at %d: %w", prev, last, service.ErrNotNext)
	}
	if err := s.owned(b.SessionID, ch); err != nil {
		return err
	}
	if r := b.Idempotency; r != nil {
		if _, ok := s.idem[idemKey{r.UserID, r.Key}]; ok {
			return service.Errorf(service.ECONFLICT, "idempotency key %q was already used", r.Key)
		}
	}
	if l := b.ShareLink; l != nil {
		if old := s.shares[l.ID]; old != nil && old.SessionID != b.SessionID {
			return fmt.Errorf("inmem: share link %s belongs to session %s, not %s", l.ID, old.SessionID, b.SessionID)
		}
		if id, ok := s.shareByHash[string(l.Hash)]; ok && id != l.ID {
			return service.Errorf(service.ECONFLICT, "a share link with that hash exists")
		}
	}
	if a := b.Admit; a != nil {
		running := 0
		for _, r := range s.runs {
			if r.UserID == a.UserID && r.Status == service.RunRunning && r.ID != a.RunID {
				running++
			}
		}
		if running >= a.Limit {
			return service.Errorf(service.ERATELIMIT, "the user has %d runs running, at most %d", running, a.Limit)
		}
	}

	// Everything below succeeds: the batch was checked against the current state.
	if sd == nil {
		sd = &sessionData{
			bytes:     b.Create.Size(),
			session:   cloneSession(b.Create),
			messages:  make(map[string]struct{}),
			onBranch:  make(map[string]bool),
			runs:      make(map[string]struct{}),
			questions: make(map[string]struct{}),
			toolCalls: make(map[string]struct{}),
			idem:      make(map[idemKey]struct{}),
			shares:    make(map[string]struct{}),
		}
		s.sessions[b.SessionID] = sd
	}
	if r := b.Idempotency; r != nil {
		k := idemKey{r.UserID, r.Key}
		s.idem[k] = cloneIdempotency(r)
		sd.idem[k] = struct{}{}
	}
	if l := b.ShareLink; l != nil {
		s.putShareLink(sd, l)
	}
	for _, e := range b.Events {
		c := cloneEvent(e)
		c.SessionID = b.SessionID
		sd.events = append(sd.events, c)
	}
	sd.bytes += ch.Bytes
	if ch.ApplySession(sd.session) {
		sd.session = cloneSession(sd.session) // nothing of the event's payload is kept
	}
	for _, m := range ch.Messages {
		if _, ok := sd.messages[m.ID]; !ok && !m.OffBranch {
			sd.onBranch[m.ID] = true
		}
		s.messages[m.ID] = cloneMessage(m)
		sd.messages[m.ID] = struct{}{}
	}
	ch.Switches.Each(func(id string, on bool) {
		if _, ok := sd.messages[id]; !ok {
			return // another session's message stays where it is
		}
		if on {
			sd.onBranch[id] = true
		} else {
			delete(sd.onBranch, id)
		}
	})
	for _, r := range ch.Runs {
		s.runs[r.ID] = cloneRun(r)
		sd.runs[r.ID] = struct{}{}
	}
	for _, q := range ch.Questions {
		s.questions[q.ID] = cloneQuestion(q)
		sd.questions[q.ID] = struct{}{}
	}
	for _, tc := range ch.ToolCalls {
		s.toolCalls[tc.ID] = cloneToolCall(tc)
		sd.toolCalls[tc.ID] = struct{}{}
	}
	if len(ch.EndedRuns) > 0 {
		for id := range sd.questions {
			if q := s.questions[id]; ch.Withdraws(q) {
				q.Withdrawn = true
			}
		}
	}
	if sp := b.Spend; sp != nil {
		s.spend(b.SessionID, sp)
	}
	return s.tell(ch)
}

// owned checks that no row of ch belongs to another session than id; s.mu must be held.
func (s *Store) owned(id string, ch *service.Changes) error {
	other := func(what, rowID, session string) error {
		if session != id {
			return fmt.Errorf("inmem: %s %s belongs to session %s, not %s", what, rowID, session, id)
		}
		return nil
	}
	for _, m := range ch.Messages {
		if err := other("message", m.ID, m.SessionID); err != nil {
			return err
		}
		if old := s.messages[m.ID]; old != nil {
			if err := other("message", m.ID, old.SessionID); err != nil {
				return err
			}
		}
	}
	for _, r := range ch.Runs {
		if err := other("run", r.ID, r.SessionID); err != nil {
			return err
		}
		if old := s.runs[r.ID]; old != nil {
			if err := other("run", r.ID, old.SessionID); err != nil {
				return err
			}
		}
	}
	for _, q := range ch.Questions {
		if err := other("question", q.ID, q.SessionID); err != nil {
			return err
		}
		if old := s.questions[q.ID]; old != nil {
			if err := other("question", q.ID, old.SessionID); err != nil {
				return err
			}
		}
	}
	for _, tc := range ch.ToolCalls {
		if err := other("tool call", tc.ID, tc.SessionID); err != nil {
			return err
		}
		if old := s.toolCalls[tc.ID]; old != nil {
			if err := other("tool call", tc.ID, old.SessionID); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteSession removes sd and everything that belongs to it; s.mu must be held.
func (s *Store) deleteSession(sd *sessionData) {
	for id := range sd.messages {
		delete(s.messages, id)
	}
	for id := range sd.runs {
		delete(s.runs, id)
	}
	for id := range sd.questions {
		delete(s.questions, id)
	}
	for id := range sd.toolCalls {
		delete(s.toolCalls, id)
	}
	for k := range sd.idem {
		delete(s.idem, k)
	}
	for id := range sd.shares {
		delete(s.shareByHash, string(s.shares[id].Hash))
		delete(s.shares, id)
	}
	for _, k := range s.bindings[sd.session.ID] {
		delete(s.threads, k)
	}
	delete(s.bindings, sd.session.ID)
	delete(s.usage, sd.session.ID)
	for id, h := range s.holds {
		if h.SessionID == sd.session.ID {
			delete(s.holds, id)
		}
	}
	delete(s.sessions, sd.session.ID)
}
