// Package inmem is a service.Store that keeps everything in memory: for tests, and for
// running the server without durable state. Nothing survives the process.
//
// It keeps the contract of service.Store like the durable stores (the storetest suite
// checks both): every batch is checked against the stored state before any of it is
// written, and rows are copied in and out, so a caller never shares memory with the stored
// data.
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
	onBranch  map[string]bool // the messages on the current branch
	runs      map[string]struct{}
	questions map[string]struct{}
	toolCalls map[string]struct{}
	idem      map[idemKey]struct{}
	events    []*service.Event // ascending Seq
	bytes     int64            // the session's weight against its user's quota
}

type idemKey struct{ userID, key string }

var _ service.Store = (*Store)(nil)
var _ service.SoleWriter = (*Store)(nil)

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
		return nil
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
		}
		s.sessions[b.SessionID] = sd
	}
	if r := b.Idempotency; r != nil {
		k := idemKey{r.UserID, r.Key}
		s.idem[k] = cloneIdempotency(r)
		sd.idem[k] = struct{}{}
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
	return nil
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

// lastSeq is the Seq of the session's last event, 0 before any.
func (sd *sessionData) lastSeq() int64 {
	if n := len(sd.events); n > 0 {
		return sd.events[n-1].Seq
	}
	return 0
}

// Compact implements service.Store.
func (s *Store) Compact(ctx context.Context, cs []service.Compaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// One stream at a time under the lock, so that a thousand replies folded at once do
	// not hold every other call up meanwhile.
	for _, c := range cs {
		if err := s.compactOne(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) compactOne(c service.Compaction) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed()
	}
	if sd := s.sessions[c.SessionID]; sd != nil {
		compact(sd, c)
	}
	return nil
}

// compact folds one stream of sd in one pass over its events from c.FromSeq, with the
// folding the service prepared when each of its runs is whole here, else with what
// Coalesce makes of the events; s.mu must be held.
func compact(sd *sessionData, c service.Compaction) {
	i, _ := findEvent(sd.events, c.FromSeq)
	folded := c.Folded
	if !c.Prepared || !runsWhole(sd.events, c) {
		folded, _ = service.Coalesce(sd.events[i:], c.Key)
	}
	if len(folded) == 0 {
		return
	}
	// Each folded event replaces the events of its run, from its CoalescedFrom (or
	// FromSeq, when the run was folded before) to itself; both are in Seq order.
	out := sd.events[:i]
	f := 0
	for _, e := range sd.events[i:] {
		for f < len(folded) && e.Seq > folded[f].Seq {
			f++
		}
		if f < len(folded) {
			switch fe := folded[f]; {
			case e.Seq == fe.Seq:
				e = cloneEvent(fe)
			case e.Seq >= max(fe.CoalescedFrom, c.FromSeq):
				continue
			}
		}
		out = append(out, e)
	}
	clear(sd.events[len(out):])
	sd.events = out
}

// runsWhole reports whether events hold every Seq of each run of c's prepared folding.
func runsWhole(events []*service.Event, c service.Compaction) bool {
	for _, e := range c.Folded {
		first := e.CoalescedFrom
		i, ok1 := findEvent(events, first)
		j, ok2 := findEvent(events, e.Seq)
		if first < c.FromSeq || !ok1 || !ok2 || int64(j-i) != e.Seq-first {
			return false
		}
	}
	return true
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

// SoleWriter implements service.SoleWriter: the store lives in this process's memory.
func (s *Store) SoleWriter() bool { return true }

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
