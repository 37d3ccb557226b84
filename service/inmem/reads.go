package inmem

import (
	"cmp"
	"context"
	"slices"
	"sort"

	"github.com/talkgraph/talkgraph/service"
)

// Session implements service.Store.
func (s *Store) Session(ctx context.Context, id string) (*service.TalkSession, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	sd := s.sessions[id]
	if sd == nil {
		return nil, service.Errorf(service.ENOTFOUND, "session %s not found", id)
	}
	c := cloneSession(sd.session)
	c.LastSeq = sd.lastSeq()
	return c, nil
}

// Sessions implements service.Store.
func (s *Store) Sessions(ctx context.Context, userID string, after *service.SessionPosition, limit int) ([]*service.TalkSession, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.TalkSession{}
	for _, sd := range s.sessions {
		ss := sd.session
		if ss.UserID != userID {
			continue
		}
		if after != nil && cmpSession(ss, after) <= 0 {
			continue
		}
		out = append(out, ss)
	}
	slices.SortFunc(out, func(a, b *service.TalkSession) int {
		return cmpSession(a, &service.SessionPosition{UpdatedAt: b.UpdatedAt, ID: b.ID})
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	for i, ss := range out {
		out[i] = cloneSession(ss)
		out[i].LastSeq = s.sessions[ss.ID].lastSeq()
	}
	return out, nil
}

// cmpSession orders sessions most recent activity first: negative when ss comes before p.
func cmpSession(ss *service.TalkSession, p *service.SessionPosition) int {
	if c := p.UpdatedAt.Compare(ss.UpdatedAt); c != 0 {
		return c
	}
	return cmp.Compare(p.ID, ss.ID)
}

// Messages implements service.Store. After and Before bound the page when set, whichever
// of First and Last is used.
func (s *Store) Messages(ctx context.Context, sessionID string, page service.MessagePage) ([]*service.Message, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	sd := s.sessions[sessionID]
	if sd == nil {
		return []*service.Message{}, nil
	}
	out := make([]*service.Message, 0, len(sd.onBranch))
	for id := range sd.onBranch {
		m := s.messages[id]
		if page.After > 0 && m.Seq <= page.After || page.Before > 0 && m.Seq >= page.Before {
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *service.Message) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID))
	})
	switch {
	case page.Last > 0 && len(out) > page.Last:
		out = out[len(out)-page.Last:]
	case page.Last <= 0 && page.First > 0 && len(out) > page.First:
		out = out[:page.First]
	}
	for i, m := range out {
		out[i] = s.messageRow(sd, m)
	}
	return out, nil
}

// messageRow is a copy of m, a message of sd, saying whether it is on the current branch.
func (s *Store) messageRow(sd *sessionData, m *service.Message) *service.Message {
	c := cloneMessage(m)
	c.OffBranch = !sd.onBranch[m.ID]
	return c
}

// Message implements service.Store.
func (s *Store) Message(ctx context.Context, id string) (*service.Message, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	m := s.messages[id]
	if m == nil {
		return nil, service.Errorf(service.ENOTFOUND, "message %s not found", id)
	}
	return s.messageRow(s.sessions[m.SessionID], m), nil
}

// Children implements service.Store.
func (s *Store) Children(ctx context.Context, sessionID, parentID string, limit int) ([]*service.Message, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.Message{}
	sd := s.sessions[sessionID]
	if sd == nil {
		return out, nil
	}
	for id := range sd.messages {
		if m := s.messages[id]; m.ParentID == parentID {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *service.Message) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	for i, m := range out {
		out[i] = s.messageRow(sd, m)
	}
	return out, nil
}

// CountMessages implements service.Store.
func (s *Store) CountMessages(ctx context.Context, sessionID string) (int, error) {
	if err := s.rlock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	if sd := s.sessions[sessionID]; sd != nil {
		return len(sd.messages), nil
	}
	return 0, nil
}

// SessionRuns implements service.Store.
func (s *Store) SessionRuns(ctx context.Context, sessionID string, statuses ...service.RunStatus) ([]*service.Run, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.Run{}
	if sd := s.sessions[sessionID]; sd != nil {
		for id := range sd.runs {
			if r := s.runs[id]; slices.Contains(statuses, r.Status) {
				out = append(out, cloneRun(r))
			}
		}
	}
	slices.SortFunc(out, func(a, b *service.Run) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Run implements service.Store.
func (s *Store) Run(ctx context.Context, id string) (*service.Run, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	r := s.runs[id]
	if r == nil {
		return nil, service.Errorf(service.ENOTFOUND, "run %s not found", id)
	}
	return cloneRun(r), nil
}

// RunsByStatus implements service.Store. Runs created at the same time are ordered by ID.
func (s *Store) RunsByStatus(ctx context.Context, statuses ...service.RunStatus) ([]*service.Run, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.Run{}
	for _, r := range s.runs {
		if slices.Contains(statuses, r.Status) {
			out = append(out, cloneRun(r))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].CreatedAt.Compare(out[j].CreatedAt); c != 0 {
			return c < 0
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Question implements service.Store.
func (s *Store) Question(ctx context.Context, id string) (*service.Question, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	q := s.questions[id]
	if q == nil {
		return nil, service.Errorf(service.ENOTFOUND, "question %s not found", id)
	}
	return cloneQuestion(q), nil
}

// ToolCall implements service.Store.
func (s *Store) ToolCall(ctx context.Context, id string) (*service.ToolCall, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	tc := s.toolCalls[id]
	if tc == nil {
		return nil, service.Errorf(service.ENOTFOUND, "tool call %s not found", id)
	}
	return cloneToolCall(tc), nil
}

// Questions implements service.Store.
func (s *Store) Questions(ctx context.Context, ids []string) ([]*service.Question, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.Question{}
	for _, id := range ids {
		if q := s.questions[id]; q != nil {
			out = append(out, cloneQuestion(q))
		}
	}
	return out, nil
}

// ToolCalls implements service.Store. Tool calls started at the same time are ordered by
// ID.
func (s *Store) ToolCalls(ctx context.Context, messageIDs []string) ([]*service.ToolCall, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	out := []*service.ToolCall{}
	if len(messageIDs) == 0 {
		return out, nil
	}
	want := make(map[string]bool, len(messageIDs))
	for _, id := range messageIDs {
		want[id] = true
	}
	for _, tc := range s.toolCalls {
		if want[tc.MessageID] {
			out = append(out, cloneToolCall(tc))
		}
	}
	slices.SortFunc(out, func(a, b *service.ToolCall) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Events implements service.Store.
func (s *Store) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]*service.Event, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	sd := s.sessions[sessionID]
	if sd == nil {
		return []*service.Event{}, nil
	}
	i, ok := findEvent(sd.events, afterSeq)
	if ok {
		i++
	}
	rest := sd.events[i:]
	if limit > 0 && len(rest) > limit {
		rest = rest[:limit]
	}
	out := make([]*service.Event, len(rest))
	for i, e := range rest {
		out[i] = cloneEvent(e)
	}
	return out, nil
}

// Idempotency implements service.Store.
func (s *Store) Idempotency(ctx context.Context, userID, key string) (*service.IdempotencyRecord, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	r := s.idem[idemKey{userID, key}]
	if r == nil {
		return nil, service.Errorf(service.ENOTFOUND, "no idempotency record for key %q", key)
	}
	return cloneIdempotency(r), nil
}

// Footprint implements service.Store.
func (s *Store) Footprint(ctx context.Context, userID string) (int, int64, error) {
	if err := s.rlock(ctx); err != nil {
		return 0, 0, err
	}
	defer s.mu.RUnlock()
	n, bytes := 0, int64(0)
	for _, sd := range s.sessions {
		if sd.session.UserID == userID {
			n++
			bytes += sd.bytes
		}
	}
	return n, bytes, nil
}
