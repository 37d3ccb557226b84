// Package inmem is a service.Store that keeps everything in memory: for tests, and for
// running the server without durable state. Nothing survives the process.
//
// It follows the same rules as the durable stores (and passes the same storetest suite):
//
//   - Apply validates the whole batch before it changes anything, so a failing batch writes
//     nothing.
//   - Rows are copied in and out: a caller never shares memory with the stored data.
//     Times come back in UTC without a monotonic clock reading, as from a database.
//   - An event's Seq may be set by the caller, and must then be the session's next one
//     (LastSeq+1, +2, … in order), or Apply returns ECONFLICT; an event with Seq 0 gets the
//     next one, written back into the caller's Event.
//   - The session's LastSeq belongs to the Store: Apply raises it by the number of events
//     appended and ignores the LastSeq of a Session in the batch.
//   - A Message with Seq 0 takes the Seq of the MessageAdded event for it in the same batch
//     (whose Message snapshot, if its Seq is 0 too, gets it as well), or else keeps the Seq
//     already stored; Apply writes the Seq it chose back into the caller's Message, as it
//     does for events.
//   - A limit of 0 or less means no limit.
package inmem

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/talkgraph/talkgraph/service"
)

// Store is an in-memory service.Store. The zero value is not usable: call New.
type Store struct {
	mu        sync.RWMutex
	closed    bool
	sessions  map[string]*sessionData
	messages  map[string]*service.Message
	runs      map[string]*service.Run
	questions map[string]*service.Question
	toolCalls map[string]*service.ToolCall
	idem      map[idemKey]*service.IdempotencyRecord
}

// sessionData is a session with the IDs of everything that belongs to it, so that Delete
// can find it all.
type sessionData struct {
	session   *service.TalkSession
	messages  map[string]struct{}
	runs      map[string]struct{}
	questions map[string]struct{}
	toolCalls map[string]struct{}
	idem      map[idemKey]struct{}
	events    []*service.Event // ascending Seq
}

type idemKey struct{ userID, key string }

var _ service.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{
		sessions:  make(map[string]*sessionData),
		messages:  make(map[string]*service.Message),
		runs:      make(map[string]*service.Run),
		questions: make(map[string]*service.Question),
		toolCalls: make(map[string]*service.ToolCall),
		idem:      make(map[idemKey]*service.IdempotencyRecord),
	}
}

func errClosed() error { return service.Errorf(service.EUNAVAILABLE, "storage is closed") }

// Apply implements service.Store.
func (s *Store) Apply(ctx context.Context, b *service.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b == nil || b.Empty() {
		return nil
	}
	if err := b.Check(); err != nil {
		return err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed()
	}
	if err := s.check(b); err != nil {
		return err
	}
	sd := s.sessions[b.SessionID]

	if b.Delete {
		s.deleteSession(sd)
		return nil
	}

	// Everything below succeeds: the batch was checked against the current state.
	if sd == nil {
		sd = &sessionData{
			messages:  make(map[string]struct{}),
			runs:      make(map[string]struct{}),
			questions: make(map[string]struct{}),
			toolCalls: make(map[string]struct{}),
			idem:      make(map[idemKey]struct{}),
		}
		s.sessions[b.SessionID] = sd
	}
	var lastSeq int64
	if sd.session != nil {
		lastSeq = sd.session.LastSeq
	}
	if b.Session != nil {
		sd.session = cloneSession(b.Session)
	}

	if b.Idempotency != nil {
		k := idemKey{b.Idempotency.UserID, b.Idempotency.Key}
		s.idem[k] = cloneIdempotency(b.Idempotency)
		sd.idem[k] = struct{}{}
	}

	for _, seq := range b.DropEvents {
		if i, ok := findEvent(sd.events, seq); ok {
			sd.events = slices.Delete(sd.events, i, i+1)
		}
	}
	for _, e := range b.Rewrite {
		c := cloneEvent(e)
		c.SessionID = b.SessionID
		if i, ok := findEvent(sd.events, e.Seq); ok {
			sd.events[i] = c
		} else {
			sd.events = slices.Insert(sd.events, i, c)
		}
	}

	// Assign sequence numbers, and remember which message each MessageAdded began.
	addedSeq := make(map[string]int64)
	seqs := make([]int64, len(b.Events))
	for i, e := range b.Events {
		lastSeq++
		seqs[i] = lastSeq
		c := cloneEvent(e)
		c.SessionID = b.SessionID
		c.Seq = lastSeq
		if c.Type == service.EventMessageAdded && c.Message != nil {
			addedSeq[c.Message.ID] = lastSeq
			if c.Message.Seq == 0 {
				c.Message.Seq = lastSeq
			}
		}
		sd.events = append(sd.events, c)
	}
	sd.session.LastSeq = lastSeq

	msgSeqs := make([]int64, len(b.Messages))
	for i, m := range b.Messages {
		c := cloneMessage(m)
		if c.Seq == 0 {
			if seq, ok := addedSeq[c.ID]; ok {
				c.Seq = seq
			} else if old := s.messages[c.ID]; old != nil {
				c.Seq = old.Seq
			}
		}
		msgSeqs[i] = c.Seq
		s.messages[c.ID] = c
		sd.messages[c.ID] = struct{}{}
	}
	for _, r := range b.Runs {
		s.runs[r.ID] = cloneRun(r)
		sd.runs[r.ID] = struct{}{}
	}
	for _, q := range b.Questions {
		s.questions[q.ID] = cloneQuestion(q)
		sd.questions[q.ID] = struct{}{}
	}
	for _, tc := range b.ToolCalls {
		s.toolCalls[tc.ID] = cloneToolCall(tc)
		sd.toolCalls[tc.ID] = struct{}{}
	}
	for _, ap := range b.OutputAppends {
		if tc := s.toolCalls[ap.ID]; tc != nil && tc.SessionID == b.SessionID {
			tc.Output += ap.Text
		}
	}

	// Tell the caller what was assigned.
	for i, e := range b.Events {
		e.SessionID = b.SessionID
		e.Seq = seqs[i]
		if e.Type == service.EventMessageAdded && e.Message != nil && e.Message.Seq == 0 {
			e.Message.Seq = seqs[i]
		}
	}
	for i, m := range b.Messages {
		m.Seq = msgSeqs[i]
	}
	if b.Session != nil {
		b.Session.LastSeq = lastSeq
	}
	return nil
}

// check validates b against the stored state; s.mu must be held.
func (s *Store) check(b *service.Batch) error {
	sd := s.sessions[b.SessionID]
	if sd == nil && (b.Session == nil || b.Delete) {
		return service.Errorf(service.ENOTFOUND, "session %s not found", b.SessionID)
	}
	if b.Idempotency != nil {
		if _, ok := s.idem[idemKey{b.Idempotency.UserID, b.Idempotency.Key}]; ok {
			return service.Errorf(service.ECONFLICT, "idempotency key %q was already used", b.Idempotency.Key)
		}
	}
	for _, m := range b.Messages {
		if old := s.messages[m.ID]; old != nil && old.SessionID != b.SessionID {
			return fmt.Errorf("inmem: message %s belongs to session %s, not %s", m.ID, old.SessionID, b.SessionID)
		}
	}
	for _, r := range b.Runs {
		if old := s.runs[r.ID]; old != nil && old.SessionID != b.SessionID {
			return fmt.Errorf("inmem: run %s belongs to session %s, not %s", r.ID, old.SessionID, b.SessionID)
		}
	}
	for _, q := range b.Questions {
		if old := s.questions[q.ID]; old != nil && old.SessionID != b.SessionID {
			return fmt.Errorf("inmem: question %s belongs to session %s, not %s", q.ID, old.SessionID, b.SessionID)
		}
	}
	for _, tc := range b.ToolCalls {
		if old := s.toolCalls[tc.ID]; old != nil && old.SessionID != b.SessionID {
			return fmt.Errorf("inmem: tool call %s belongs to session %s, not %s", tc.ID, old.SessionID, b.SessionID)
		}
	}
	var lastSeq int64
	if sd != nil && sd.session != nil {
		lastSeq = sd.session.LastSeq
	}
	next := lastSeq
	for _, e := range b.Events {
		next++
		if e.Seq != 0 && e.Seq != next {
			return service.Errorf(service.ECONFLICT, "event sequence number %d does not follow the session's last, %d", e.Seq, next-1)
		}
	}
	for _, e := range b.Rewrite {
		if e.Seq > lastSeq {
			return fmt.Errorf("inmem: rewrite of event %d beyond the session's last %d", e.Seq, lastSeq)
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
	delete(s.sessions, sd.session.ID)
}

// findEvent returns the index of the event with seq in events, or where it would go.
func findEvent(events []*service.Event, seq int64) (int, bool) {
	return slices.BinarySearchFunc(events, seq, func(e *service.Event, seq int64) int {
		return cmp.Compare(e.Seq, seq)
	})
}

// rlock takes the read lock, unless the store is closed.
func (s *Store) rlock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return errClosed()
	}
	return nil
}

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
	return cloneSession(sd.session), nil
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
	out := make([]*service.Message, 0, len(sd.messages))
	for id := range sd.messages {
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
		out[i] = cloneMessage(m)
	}
	return out, nil
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
	return cloneMessage(m), nil
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

// Ping implements service.Store: it fails only once the store is closed.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rlock(ctx); err != nil {
		return err
	}
	s.mu.RUnlock()
	return nil
}

// Close implements service.Store. Afterwards every method returns EUNAVAILABLE.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
