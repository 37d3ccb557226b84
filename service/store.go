package service

import (
	"context"
	"time"
)

// Store keeps sessions, messages, runs, questions, tool calls, idempotency records and each
// session's event log. The service serialises writes to one session; a Store must still be
// safe for concurrent use across sessions and for reads at any time.
//
// Every method returns an *Error with ENOTFOUND where it says so, EUNAVAILABLE when the
// storage cannot be reached or written (a full disk, a locked file), and other errors only
// for bugs.
type Store interface {
	// Apply makes all of b's writes durable at once, or none of them. The events in b.Events
	// carry the session's next sequence numbers, set by the caller (LastSeq+1, +2, …); Apply
	// stores them and sets the session's LastSeq to the last one. Writes to a session that
	// does not exist (other than creating it with b.Session) return ENOTFOUND.
	Apply(ctx context.Context, b *Batch) error

	// Session returns the session; ENOTFOUND when missing. It does not check the owner: the
	// service does.
	Session(ctx context.Context, id string) (*TalkSession, error)
	// Sessions returns up to limit sessions of userID, most recent activity first (UpdatedAt
	// descending, then ID descending), strictly after the given position when after is set.
	Sessions(ctx context.Context, userID string, after *SessionPosition, limit int) ([]*TalkSession, error)

	// Messages returns a page of the session's history ordered by Seq ascending, as the
	// MessagePage says. Empty, not an error, for a session with no messages.
	Messages(ctx context.Context, sessionID string, page MessagePage) ([]*Message, error)
	// Message returns one message; ENOTFOUND when missing.
	Message(ctx context.Context, id string) (*Message, error)

	// Run returns one run; ENOTFOUND when missing.
	Run(ctx context.Context, id string) (*Run, error)
	// RunsByStatus returns every run in one of the given statuses, oldest first, across all
	// sessions: what recovery at start-up needs.
	RunsByStatus(ctx context.Context, statuses ...RunStatus) ([]*Run, error)

	// Question returns one question; ENOTFOUND when missing.
	Question(ctx context.Context, id string) (*Question, error)
	// ToolCalls returns the tool calls of the given messages, by start time.
	ToolCalls(ctx context.Context, messageIDs []string) ([]*ToolCall, error)

	// Events returns up to limit events of the session with Seq > afterSeq, by Seq.
	Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]*Event, error)

	// Idempotency returns the record stored for (userID, key); ENOTFOUND when none.
	Idempotency(ctx context.Context, userID, key string) (*IdempotencyRecord, error)

	// Ping returns nil while the store can be written.
	Ping(ctx context.Context) error
	// Close releases the store. Batches applied before it returns are durable.
	Close() error
}

// Batch is a set of writes the Store applies atomically. Rows are upserted by ID with all
// their fields.
type Batch struct {
	// SessionID is the session every row below belongs to.
	SessionID string

	Session   *TalkSession // create or replace
	Delete    bool         // delete the session and everything that belongs to it
	Messages  []*Message
	Runs      []*Run
	Questions []*Question
	ToolCalls []*ToolCall
	// Events are appended to the session's log, with Seq set by the caller.
	Events []*Event
	// Idempotency is inserted; ECONFLICT when (UserID, Key) already exists.
	Idempotency *IdempotencyRecord
	// OutputAppends add text to the end of stored tool calls' Output, after the rows above
	// are written: streaming writes only what is new. Appends to rows that do not exist are
	// ignored. (A streaming message's text is kept only in its chunk events until the
	// message completes; see the service's recovery.)
	OutputAppends []TextAppend
	// Rewrite replaces stored events with the same Seq (for compaction), and DropEvents
	// deletes events by Seq.
	Rewrite    []*Event
	DropEvents []int64
}

// Empty reports whether the batch writes nothing.
func (b *Batch) Empty() bool {
	return b.Session == nil && !b.Delete && len(b.Messages) == 0 && len(b.Runs) == 0 &&
		len(b.Questions) == 0 && len(b.ToolCalls) == 0 && len(b.Events) == 0 &&
		len(b.OutputAppends) == 0 &&
		b.Idempotency == nil && len(b.Rewrite) == 0 && len(b.DropEvents) == 0
}

// TextAppend adds Text to the end of the text of the row with ID.
type TextAppend struct {
	ID   string
	Text string
}

// SessionPosition is a place in a user's session list.
type SessionPosition struct {
	UpdatedAt time.Time
	ID        string
}

// MessagePage selects part of a history ordered by Seq. With Last set it takes the last
// Last messages before Before (when set); otherwise the first First messages after After
// (when set). The result is always in ascending Seq order.
type MessagePage struct {
	After  int64
	Before int64
	First  int
	Last   int
}

// IdempotencyRecord remembers what an addMessage with a key created, so a retry answers
// the same.
type IdempotencyRecord struct {
	UserID    string
	Key       string
	SessionID string
	MessageID string
	RunID     string
	CreatedAt time.Time
}
