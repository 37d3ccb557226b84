package service

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file is the service's side of AG-UI (package agui, httpapi's /agui): a client
// names its conversations with thread IDs of its own, which are bound, per user, to
// sessions (Store.BindThread); and a stream that resumes from a cursor learns where it
// stands (StreamAt).

// OpenThread returns the caller's session that threadID names: the session of that ID
// when it is one of theirs; otherwise the session bound to the caller's thread threadID,
// made now (with the default settings) when there is none. Thread IDs are the client's
// own, so another user's thread of the same ID is another session. EINVALID for an empty
// or oversized thread ID; EUNAVAILABLE when it cannot be written.
func (s *Service) OpenThread(ctx context.Context, threadID string) (*SessionView, error) {
	r, err := s.exec(ctx, &Command{Op: "openThread", Args: &ThreadArgs{ThreadID: threadID}})
	if err != nil {
		return nil, err
	}
	return s.answeredView(ctx, r, r.Session.ID)
}

// Thread returns the caller's session that threadID names, as OpenThread, without
// making one: ENOTFOUND when there is none.
func (s *Service) Thread(ctx context.Context, threadID string) (*SessionView, error) {
	u, err := user(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkThread(threadID); err != nil {
		return nil, err
	}
	if checkID("", threadID) == nil {
		if v, err := s.view(ctx, threadID); ErrorCode(err) != ENOTFOUND {
			return v, err
		}
	}
	id, err := s.store.Thread(ctx, u, threadID)
	if err != nil {
		return nil, err
	}
	return s.view(ctx, id)
}

// ThreadArgs are openThread's arguments.
type ThreadArgs struct {
	ThreadID string `json:"thread"`
}

// maxThreadID bounds a thread ID, as it bounds an idempotency key.
const maxThreadID = 200

func checkThread(id string) error {
	switch {
	case id == "":
		return Errorf(EINVALID, "the thread ID is empty")
	case len(id) > maxThreadID:
		return Errorf(EINVALID, "the thread ID is too long: at most %d bytes", maxThreadID)
	case !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0:
		return Errorf(EINVALID, "the thread ID is not valid UTF-8 text without control characters")
	}
	return nil
}

func init() {
	addOperation("openThread", &operation{
		args:  func() any { return new(ThreadArgs) },
		local: true, // it may make a new session
		check: func(c *core, args any) error { return checkThread(args.(*ThreadArgs).ThreadID) },
		do: func(ctx context.Context, s *Service, cmd *Command) (*Reply, error) {
			return viewReply(s.openThread(ctx, cmd.UserID, cmd.Guest, cmd.Args.(*ThreadArgs).ThreadID))
		},
	})
}

// openThread is OpenThread. The binding comes first, to a new session's ID, and the
// session second: of two requests for a new thread both make the one session bound, and
// a binding whose session a crash kept from being made gets it at the next request.
func (s *core) openThread(ctx context.Context, u string, guest bool, threadID string) (*SessionView, error) {
	if checkID("", threadID) == nil {
		if sess, err := s.ownSession(ctx, u, threadID); err == nil {
			return s.viewOf(ctx, sess), nil
		} else if ErrorCode(err) != ENOTFOUND {
			return nil, err
		}
	}
	id, err := s.store.BindThread(ctx, u, threadID, newID())
	if err != nil {
		return nil, err
	}
	sess, err := s.ownSession(ctx, u, id)
	if err == nil {
		return s.viewOf(ctx, sess), nil
	}
	if ErrorCode(err) != ENOTFOUND {
		return nil, err
	}
	v, err := s.createSession(ctx, u, guest, id, "", SettingsInput{})
	if ErrorCode(err) == ECONFLICT { // the other request made it first
		if sess, err := s.ownSession(ctx, u, id); err == nil {
			return s.viewOf(ctx, sess), nil
		}
	}
	return v, err
}

// StreamPoint is where a stream that resumes after a cursor stands.
type StreamPoint struct {
	// Event is the event the cursor follows (the chunk event that holds it, where chunks
	// were folded), and RunID the run it belongs to ("" for an event of no run).
	Event *Event
	RunID string
	// Open is the assistant message whose text had begun there and was not complete ("" for
	// none), and Sent how much of its text came before the cursor, in code points. A run's
	// end or wait (a RunStatusChanged) closes its text.
	Open string
	Sent int
}

// StreamAt returns where a stream of the caller's session resumed after cursor stands.
// ENOTFOUND when the session is missing or not the caller's; EINVALID for a malformed
// cursor, one of another session or one that no event of the log holds.
func (s *Service) StreamAt(ctx context.Context, sessionID, cursor string) (*StreamPoint, error) {
	if _, err := s.session(ctx, sessionID); err != nil {
		return nil, err
	}
	c, err := DecodeCursor(sessionID, cursor)
	if err != nil {
		return nil, err
	}
	ev, err := s.eventHolding(ctx, sessionID, c.Seq)
	if err != nil {
		return nil, err
	}
	if ev == nil || !offsetWithin(ev, c) {
		return nil, Errorf(EINVALID, "no event of the session is at this cursor")
	}
	p := &StreamPoint{Event: ev}
	var message string // the message ev is part of
	switch {
	case ev.Run != nil:
		p.RunID = ev.Run.ID
	case ev.Message != nil:
		p.RunID, message = ev.Message.RunID, ev.Message.ID
	case ev.ToolCall != nil:
		p.RunID, message = ev.ToolCall.RunID, ev.ToolCall.MessageID
	case ev.Question != nil:
		p.RunID = ev.Question.RunID
	case ev.Type == EventToolCallOutput:
		if tc, err := s.store.ToolCall(ctx, ev.Key); err == nil {
			p.RunID, message = tc.RunID, tc.MessageID
		}
	case ev.MessageID != "":
		if m, err := s.store.Message(ctx, ev.MessageID); err == nil {
			p.RunID = m.RunID
		}
		if ev.Type == EventMessageChunk {
			p.Open, p.Sent = ev.MessageID, c.Off
			return p, nil
		}
	}
	if message == "" || ev.Type == EventMessageCompleted {
		return p, nil
	}
	p.Open, p.Sent, err = s.textAt(ctx, sessionID, message, c.Seq)
	if p.Sent == 0 {
		p.Open = "" // its text had not begun
	}
	return p, err
}

// textAt returns the assistant message id with how much of its text the log holds up to
// seq, unless it was complete there; "" when it was, or is not an assistant's text.
func (s *Service) textAt(ctx context.Context, sessionID, id string, seq int64) (string, int, error) {
	m, err := s.store.Message(ctx, id)
	if ErrorCode(err) == ENOTFOUND {
		return "", 0, nil
	} else if err != nil {
		return "", 0, err
	}
	if m.SessionID != sessionID || m.Role != RoleAssistant || m.Kind != KindText {
		return "", 0, nil
	}
	sent := 0
	for after := m.Seq - 1; after < seq; {
		evs, err := s.store.Events(ctx, sessionID, after, 256)
		if err != nil {
			return "", 0, err
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.Seq > seq {
				return id, sent, nil
			}
			switch {
			case ev.Type == EventMessageAdded && ev.Message != nil && ev.Message.ID == id:
				sent = utf8.RuneCountInString(ev.Message.Content)
			case ev.Type == EventMessageChunk && ev.MessageID == id:
				sent = CursorOf(ev).Off
			case ev.Type == EventMessageCompleted && ev.Message != nil && ev.Message.ID == id:
				return "", 0, nil
			}
			after = ev.Seq
		}
	}
	return id, sent, nil
}
