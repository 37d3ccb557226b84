package service

import (
	"context"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Reading through a share link: what a reader gets, and the one filter it goes through.

// ErrNoShare ends what a share link opened once the link no longer opens it (revoked,
// expired, its session deleted), and answers a token that opens nothing.
var ErrNoShare = errNoShare

// ShareMask is how a shared read shows what it reads, set on each HistoryMessage it gives
// out: without the session's ID, the question behind a message, tool calls' approvals,
// and, unless the link includes them, tool calls' arguments, output and results.
type ShareMask struct {
	sessionID    string
	includeTools bool
}

// SharedView is a session as a share link shows it.
type SharedView struct {
	Title string
	Live  bool
	// Messages are the branch the link shows, oldest first.
	Messages []*HistoryMessage
	// StreamCursor is where a live link's stream follows on from Messages (SharedStream's
	// after); empty for a snapshot.
	StreamCursor string
}

// SharedSession returns what the link token opens; nil, with no error, for a token that
// opens nothing: unknown, malformed, revoked or expired alike. A live link shows the
// current branch as it is now, a snapshot the branch as it was when the link was made,
// each as its last MaxForkMessages messages. Each read counts as one of the link's views.
// An error only when the storage cannot be read.
func (s *Service) SharedSession(ctx context.Context, token string) (*SharedView, error) {
	l, err := s.findShareLink(ctx, token)
	if err == errNoShare {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	v, err := s.sharedView(ctx, l)
	if err == errNoShare {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	s.countView(ctx, l)
	return v, nil
}

// countView counts a view of l. A count that cannot be written is not worth failing the
// read for: it is logged.
func (s *core) countView(ctx context.Context, l *ShareLink) {
	if err := s.store.CountShareView(ctx, l.ID); err != nil {
		s.log.Warn("counting a share link's view", "link", l.ID, "err", err)
	}
}

// sharedView reads what l shows.
func (s *core) sharedView(ctx context.Context, l *ShareLink) (*SharedView, error) {
	sess, err := s.store.Session(ctx, l.SessionID)
	if ErrorCode(err) == ENOTFOUND {
		return nil, errNoShare
	} else if err != nil {
		return nil, err
	}
	out := &SharedView{Title: sess.Title, Live: l.Live}
	var msgs []*HistoryMessage
	if l.Live {
		v := s.viewOf(ctx, sess)
		page, err := s.store.Messages(ctx, sess.ID, MessagePage{Before: v.asOf.seq + 1, Last: s.cfg.MaxForkMessages})
		if err != nil {
			return nil, err
		}
		if msgs, err = s.complete(ctx, page, &v.asOf); err != nil {
			return nil, err
		}
		out.StreamCursor = EncodeShareCursor(v.pos)
	} else if msgs, err = s.snapshotOf(ctx, l); err != nil {
		return nil, err
	}
	mask := &ShareMask{sessionID: l.SessionID, includeTools: l.IncludeTools}
	for _, h := range msgs {
		mask.message(h)
	}
	out.Messages = msgs
	return out, nil
}

// snapshotOf reads the branch a snapshot link shows: the path up from its leaf, each
// message as the link froze it.
func (s *core) snapshotOf(ctx context.Context, l *ShareLink) ([]*HistoryMessage, error) {
	snap := l.Snapshot
	if snap == nil || snap.Leaf == "" {
		return []*HistoryMessage{}, nil
	}
	path, err := s.branchTo(ctx, l.SessionID, snap.Leaf, s.cfg.MaxForkMessages)
	if err != nil {
		return nil, err
	}
	hist, err := s.complete(ctx, path, nil)
	if err != nil {
		return nil, err
	}
	return hist, s.freeze(ctx, l.SessionID, hist, snap)
}

// branchTo returns the path from a first message to leaf, its last limit messages, by
// Seq: the current branch up to where the path leaves it (one range), then the messages
// off it, found up by their parents.
func (s *core) branchTo(ctx context.Context, sessionID, leaf string, limit int) ([]*Message, error) {
	var off []*Message
	fork := int64(0) // the Seq of the last message on the current branch, if any
	for id := leaf; id != "" && len(off) < limit; {
		m, err := s.store.Message(ctx, id)
		if ErrorCode(err) == ENOTFOUND {
			break // a snapshot's messages stay as long as their session: nothing to follow
		} else if err != nil {
			return nil, err
		}
		if m.SessionID != sessionID {
			break
		}
		if !m.OffBranch {
			fork = m.Seq
			break
		}
		off = append(off, m)
		id = m.ParentID
	}
	var path []*Message
	if fork > 0 && len(off) < limit {
		var err error
		if path, err = s.store.Messages(ctx, sessionID, MessagePage{Before: fork + 1, Last: limit - len(off)}); err != nil {
			return nil, err
		}
	}
	for i := len(off) - 1; i >= 0; i-- {
		path = append(path, off[i])
	}
	return path, nil
}

// freeze shows hist as snap froze it: the message then being written with its text then,
// still STREAMING, and the calls of the run then active as they were, those begun later
// left out.
func (s *core) freeze(ctx context.Context, sessionID string, hist []*HistoryMessage, snap *ShareSnapshot) error {
	tools := make(map[string]FrozenTool, len(snap.Tools))
	for _, t := range snap.Tools {
		tools[t.ID] = t
	}
	// Text still being written now lives in the log's chunks only: read it as of then.
	from, need := int64(0), false
	for _, h := range hist {
		still := snap.Text != nil && h.ID == snap.Text.ID && h.Status == MessageStreaming
		for _, c := range h.ToolCalls {
			if f, ok := tools[c.ID]; ok && !f.Status.final() && c.Status == ToolRunning {
				still = true
			}
		}
		if still && (!need || h.Seq-1 < from) {
			from, need = h.Seq-1, true
		}
	}
	var texts map[string]string
	if need {
		var err error
		if texts, err = s.streamedTexts(ctx, sessionID, from, snap.Seq); err != nil {
			return err
		}
	}
	for _, h := range hist {
		if snap.Text != nil && h.ID == snap.Text.ID {
			if h.Status == MessageStreaming {
				h.Content = texts[h.ID]
			}
			h.Content, h.Status, h.Error = firstRunes(h.Content, snap.Text.Runes), MessageStreaming, ""
		}
		calls := h.ToolCalls[:0]
		for _, c := range h.ToolCalls {
			if c.RunID == snap.Run && snap.Run != "" {
				f, ok := tools[c.ID]
				if !ok {
					continue // begun after the snapshot
				}
				if !f.Status.final() {
					was := *c
					if c.Status == ToolRunning {
						was.Output = texts[c.ID]
					}
					was.Status, was.Output, was.Result, was.Error, was.FinishedAt = f.Status, firstRunes(was.Output, f.Runes), nil, nil, nil
					c = &was
				}
			}
			calls = append(calls, c)
		}
		h.ToolCalls = calls
	}
	return nil
}

// final reports whether s is a status a call never leaves.
func (s ToolCallStatus) final() bool { return s != ToolRunning && s != ToolAwaitingApproval }

// firstRunes returns s cut to its first n code points.
func firstRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// message shows h as a reader may see it.
func (m *ShareMask) message(h *HistoryMessage) {
	h.SessionID, h.QuestionID, h.Question, h.Shared = "", "", nil, m
	for i, c := range h.ToolCalls {
		h.ToolCalls[i] = m.toolCall(c)
	}
}

// toolCall returns a copy of c as a reader may see it.
func (m *ShareMask) toolCall(c *ToolCall) *ToolCall {
	cp := *c
	cp.SessionID, cp.Approval = "", nil
	if !m.includeTools {
		cp.CallID, cp.Arguments, cp.Output, cp.Result, cp.Error = "", "", "", nil, nil
	}
	return &cp
}

// run returns a copy of r as a reader may see it.
func (m *ShareMask) run(r *Run) *Run {
	cp := *r
	cp.SessionID, cp.UserID, cp.Owner, cp.ReplyTo, cp.Agent = "", "", "", "", ""
	cp.Budget = "" // which of the owner's caps holds it: theirs to know
	return &cp
}

// ToolCalls returns the tool calls of h, a message a shared read gave out, as the reader
// may see them.
func (m *ShareMask) ToolCalls(ctx context.Context, s *Service, h *HistoryMessage) ([]*ToolCall, error) {
	calls, err := s.store.ToolCalls(ctx, []string{h.ID})
	if err != nil {
		return nil, err
	}
	out := make([]*ToolCall, 0, len(calls))
	for _, c := range calls {
		if c.SessionID == m.sessionID {
			out = append(out, m.toolCall(c))
		}
	}
	return out, nil
}

// sharedEvents are the types of the events a live link's reader sees (through the mask):
// the branch's messages and their text, its runs' statuses, switches of branch and tool
// calls (their output with includeTools). Not: what the session waits on (questions,
// approvals asked), its row (SessionUpdated), links.
var sharedEvents = map[EventType]bool{
	EventMessageAdded: true, EventMessageChunk: true, EventMessageCompleted: true, EventRunStatusChanged: true,
	EventBranchSelected: true, EventToolCallStarted: true, EventToolCallOutput: true, EventToolCallFinished: true,
	EventToolApprovalDecided: true,
}

// SharedEventTypes lists the types of the events a live link's reader may see, sorted.
func SharedEventTypes() []EventType {
	out := make([]EventType, 0, len(sharedEvents))
	for t := range sharedEvents {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// event returns what a reader may see of ev, a copy; nil for an event a reader does not
// see (see sharedEvents).
func (m *ShareMask) event(ev *Event) *Event {
	if !sharedEvents[ev.Type] {
		return nil
	}
	cp := *ev
	cp.Question, cp.Session, cp.Branch = nil, nil, nil
	switch ev.Type {
	case EventMessageAdded, EventMessageCompleted:
		if ev.Message == nil || ev.Message.OffBranch {
			return nil
		}
		msg := *ev.Message
		msg.SessionID, msg.QuestionID = "", ""
		cp.Message = &msg
	case EventMessageChunk, EventBranchSelected:
	case EventToolCallOutput:
		if !m.includeTools {
			return nil
		}
	case EventRunStatusChanged:
		if ev.Run == nil {
			return nil
		}
		cp.Run = m.run(ev.Run)
	case EventToolCallStarted, EventToolCallFinished, EventToolApprovalDecided:
		if ev.ToolCall == nil {
			return nil
		}
		cp.ToolCall = m.toolCall(ev.ToolCall)
	default:
		return nil
	}
	return &cp
}

// SharedSubscription is a live link's stream: a subscription to its session's log whose
// events go through the link's filter, and which ends (ErrNoShare) once the link is
// revoked (its ShareLinkRevoked event comes by in the log), expires (a timer wakes the
// reader at the expiry) or its session is deleted.
type SharedSubscription struct {
	sub   *Subscription
	link  *ShareLink
	mask  *ShareMask
	c     *core
	timer *time.Timer

	mu    sync.Mutex
	ended bool
}

// SubscribeShared opens the stream of the live link token, after the shared cursor after
// (a SharedView's StreamCursor or an event's), or at the end of the log when after is
// empty; see Subscribe for notify. It counts as one of the link's views. ENOTFOUND
// (ErrNoShare) for a token that opens nothing, or a snapshot link's; EINVALID for a bad
// cursor; ERATELIMIT and EUNAVAILABLE as Subscribe.
func (s *Service) SubscribeShared(ctx context.Context, token, after string, notify func()) (*SharedSubscription, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	l, err := s.findShareLink(ctx, token)
	if err != nil {
		return nil, err
	}
	if !l.Live {
		return nil, errNoShare
	}
	var pos *Cursor
	if after != "" {
		c, err := DecodeShareCursor(after)
		if err != nil {
			return nil, err
		}
		pos = &c
	}
	m, _ := s.states.mark(l.SessionID)
	sess, err := s.store.Session(ctx, l.SessionID)
	if ErrorCode(err) == ENOTFOUND {
		return nil, errNoShare
	} else if err != nil {
		return nil, err
	}
	sub, err := s.subscribe(ctx, sess, m, pos, notify)
	if err != nil {
		return nil, err
	}
	ss := &SharedSubscription{sub: sub, link: l, mask: &ShareMask{sessionID: l.SessionID, includeTools: l.IncludeTools}, c: s.core}
	if l.ExpiresAt != nil {
		ss.timer = time.AfterFunc(time.Until(*l.ExpiresAt), notify)
	}
	s.countView(ctx, l)
	return ss, nil
}

// Mask is how the stream shows messages whose tool calls are read later.
func (ss *SharedSubscription) Mask() *ShareMask { return ss.mask }

// Read returns up to max events a reader may see after the stream's position, as
// Subscription.Read does; ErrNoShare once the link no longer opens the session (after
// the events before its revocation).
func (ss *SharedSubscription) Read(ctx context.Context, max int) ([]*Event, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for {
		if ss.ended || !ss.link.Active(ss.c.now()) {
			ss.ended = true
			return nil, errNoShare
		}
		evs, err := ss.sub.Read(ctx, max)
		if err == ErrSessionDeleted {
			ss.ended = true
			return nil, errNoShare
		}
		if err != nil || len(evs) == 0 {
			return nil, err
		}
		var out []*Event
		for _, ev := range evs {
			if ev.Type == EventShareLinkRevoked && ev.Key == ss.link.ID {
				ss.ended = true
				break
			}
			if cp := ss.mask.event(ev); cp != nil {
				out = append(out, cp)
			}
		}
		if len(out) > 0 {
			return out, nil
		}
	}
}

// Close ends the stream; it is safe to call more than once.
func (ss *SharedSubscription) Close() {
	if ss.timer != nil {
		ss.timer.Stop()
	}
	ss.sub.Close()
}

// A shared cursor is a position in a shared session's log that names no session:
// base64url of "h:<seq>:<off>". The token says which session.

// EncodeShareCursor returns the shared cursor of position c.
func EncodeShareCursor(c Cursor) string {
	raw := "h:" + strconv.FormatInt(c.Seq, 10) + ":" + strconv.Itoa(c.Off)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// DecodeShareCursor parses a shared cursor; EINVALID when it is malformed.
func DecodeShareCursor(s string) (Cursor, error) {
	bad := Errorf(EINVALID, "invalid cursor")
	if len(s) > 200 {
		return Cursor{}, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, bad
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != "h" {
		return Cursor{}, bad
	}
	seq, err1 := strconv.ParseInt(parts[1], 10, 64)
	off, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || seq < 0 || off < 0 {
		return Cursor{}, bad
	}
	return Cursor{Seq: seq, Off: off}, nil
}
