package service

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"
)

// This file is the whole contract between the service and its storage: the Store
// interface, what it is handed (Batch, Compaction), what a store shared by replicas adds
// (Coordinator), and the optional abilities a store may have, each a named interface.
// The rows a store keeps follow from the events by Derive and Coalesce (derive.go); the
// conformance suite in package storetest checks every sentence here against each store.

// Store keeps what the service writes: each session's event log, the rows that queries
// read (sessions, messages, runs, questions, tool calls), which are derived from the log,
// and idempotency records. The log is the truth; the rows are what Derive makes of it.
//
// The service owns sequence numbers: it numbers a session's events itself and hands them
// over in order, and never writes one session from two goroutines at once. A Store must
// still be safe for concurrent use, for reads at any time and for Appends of different
// sessions.
//
// Every method returns an *Error with ENOTFOUND where it says so, EUNAVAILABLE when the
// storage cannot be reached or written (a full disk, a locked file, a lost connection),
// and other errors only for bugs. Rows come back as copies the caller may change, with
// times in UTC to the nanosecond and without a monotonic clock reading. A limit of 0 or
// less means no limit. Rows with equal sort keys are ordered by ID.
type Store interface {
	// Append makes each batch durable as a whole, or writes nothing of it: batch i was
	// written when errs[i] is nil (errs has one entry per batch). Batches fail alone:
	// ENOTFOUND for a batch that writes to a session that does not exist (other than one
	// that creates it), ECONFLICT for events that do not follow the stored log (the first
	// event's Seq is not the session's LastSeq+1: ErrNotNext) and for an idempotency
	// record whose (UserID, Key) exists, ERATELIMIT for an Admission refused, EINVALID for
	// a malformed batch (see Batch.Check). A failure of the storage itself (EUNAVAILABLE)
	// fails every batch of the call. For each batch written, the rows change as
	// Batch.Derive says: every row of Changes upserted whole (but for whether a stored
	// message is on the current branch), then the messages of the batch's session that
	// Changes.Switches names put on the branch (On) or taken off it (Off), batch after
	// batch (a message of another session is left alone), the session's row as
	// Changes.SessionRow says, and the questions Changes.Withdraws names withdrawn; its
	// Spend is counted (see UsageStore). Append never changes the batches, their events or
	// their payloads. A batch that deletes its session deletes its usage count and its
	// reservations too (its user's count stays).
	Append(ctx context.Context, batches []*Batch) (errs []error)

	// Compact folds, for each of cs, the chunk events of one stream of a session
	// (Event.Key == Key) from Seq FromSeq on into one event per unbroken run, as Coalesce
	// says; it changes nothing else, and nothing when there is nothing to fold. A session
	// that does not exist (deleted meanwhile) is skipped. A store may fold them all in one
	// transaction: compaction is done in the background, many streams at a time.
	Compact(ctx context.Context, cs []Compaction) error

	// Session returns the session, with LastSeq the Seq of its last event (0 before any);
	// ENOTFOUND when missing. It does not check the owner: the service does.
	Session(ctx context.Context, id string) (*TalkSession, error)
	// Sessions returns up to limit sessions of userID, most recent activity first
	// (UpdatedAt descending, then ID descending), strictly after the given position when
	// after is not nil.
	Sessions(ctx context.Context, userID string, after *SessionPosition, limit int) ([]*TalkSession, error)

	// Messages returns a page of the session's current branch ordered by Seq ascending,
	// as the MessagePage says: the messages on it, which are the path from a first
	// message to the branch's last (each message's parent is the one before it). Which
	// messages are on it: each as its MessageAdded put it (Message.OffBranch), then as
	// Changes.Switches say. It is one range of an index, however many branches the
	// session has. Empty, not an error, for a session with no messages or none.
	Messages(ctx context.Context, sessionID string, page MessagePage) ([]*Message, error)
	// Message returns one message, on the current branch or not; ENOTFOUND when missing.
	Message(ctx context.Context, id string) (*Message, error)
	// Children returns up to limit messages of the session whose parent is parentID
	// ("" for its first messages), by Seq: a message's siblings, a branch's next steps.
	Children(ctx context.Context, sessionID, parentID string, limit int) ([]*Message, error)
	// CountMessages returns how many messages the session has, on every branch.
	CountMessages(ctx context.Context, sessionID string) (int, error)
	// SessionRuns returns the session's runs in one of the given statuses, oldest first
	// (CreatedAt, then ID).
	SessionRuns(ctx context.Context, sessionID string, statuses ...RunStatus) ([]*Run, error)

	// Run returns one run; ENOTFOUND when missing.
	Run(ctx context.Context, id string) (*Run, error)
	// RunsByStatus returns every run in one of the given statuses, oldest first
	// (CreatedAt, then ID), across all sessions: what recovery at start-up needs.
	RunsByStatus(ctx context.Context, statuses ...RunStatus) ([]*Run, error)

	// Question returns one question; ENOTFOUND when missing.
	Question(ctx context.Context, id string) (*Question, error)
	// Questions returns the questions with the given IDs that exist, in no set order.
	Questions(ctx context.Context, ids []string) ([]*Question, error)
	// ToolCalls returns the tool calls of the given messages, by StartedAt then ID.
	ToolCalls(ctx context.Context, messageIDs []string) ([]*ToolCall, error)
	// ToolCall returns one tool call; ENOTFOUND when missing.
	ToolCall(ctx context.Context, id string) (*ToolCall, error)

	// Events returns up to limit events of the session with Seq > afterSeq, by Seq. Empty,
	// not an error, for a missing session.
	Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]*Event, error)

	// ShareLink returns the share link whose Hash is hash; ENOTFOUND when none (a link
	// goes with its session's deletion). ShareLinkByID returns one by its ID; ENOTFOUND
	// when missing. ShareLinks returns a session's links, oldest first (CreatedAt, then
	// ID); empty for a session with none or missing.
	ShareLink(ctx context.Context, hash []byte) (*ShareLink, error)
	ShareLinkByID(ctx context.Context, id string) (*ShareLink, error)
	ShareLinks(ctx context.Context, sessionID string) ([]*ShareLink, error)
	// CountShareView adds one to the link's Views; nothing, and no error, for a link
	// that does not exist. Views change only so: a batch that writes the link keeps them.
	CountShareView(ctx context.Context, id string) error

	// Idempotency returns the record stored for (userID, key); ENOTFOUND when none.
	Idempotency(ctx context.Context, userID, key string) (*IdempotencyRecord, error)

	// Thread returns the session userID's AG-UI thread threadID is bound to (see
	// BindThread); ENOTFOUND when it is bound to none.
	Thread(ctx context.Context, userID, threadID string) (string, error)
	// BindThread binds userID's AG-UI thread threadID to sessionID unless it is bound
	// already, and returns the session it is bound to: sessionID, or the one an earlier
	// call bound (whichever of two concurrent calls came first). The session need not
	// exist yet. A batch that deletes a session removes every binding to it.
	BindThread(ctx context.Context, userID, threadID, sessionID string) (string, error)

	// Footprint returns how many sessions userID has and how many bytes they weigh: the
	// sum of their creations' Size and of the Bytes that Derive counted for their events.
	Footprint(ctx context.Context, userID string) (sessions int, bytes int64, err error)

	// UserStore is what a store keeps per user: the viewer log, webhooks and deliveries.
	UserStore

	// Ping returns nil while the store can be written.
	Ping(ctx context.Context) error

	UsageStore
	ScheduleStore

	// Close releases the store. Batches appended before it returns are durable; every
	// method returns EUNAVAILABLE afterwards.
	Close() error
}

// ErrNotNext is the ECONFLICT a Store returns (wrapped or not) for events that do not
// follow the stored log: another writer appended to the session meanwhile.
var ErrNotNext = Errorf(ECONFLICT, "the session changed meanwhile; try again")

// isNotNext reports whether err is ErrNotNext, wrapped or not.
func isNotNext(err error) bool { return errors.Is(err, ErrNotNext) }

// Batch is what the service writes to one session at once: the session's creation or
// deletion, events to append to its log, and an idempotency record. The rows that queries
// read follow from the events (see Derive).
type Batch struct {
	// SessionID is the session the batch writes to.
	SessionID string
	// Create creates the session (with an empty log); its ID is SessionID.
	Create *TalkSession
	// Delete deletes the session and everything that belongs to it; a batch that deletes
	// writes nothing else.
	Delete bool
	// Events are appended to the session's log. Their Seq are consecutive and the first is
	// the session's LastSeq+1; their SessionID is SessionID or empty.
	Events []*Event
	// Idempotency is stored with the events; the batch fails with ECONFLICT when
	// (UserID, Key) already exists.
	Idempotency *IdempotencyRecord
	// ShareLink, when set, is a share link of the session, written whole with the batch
	// (inserted, or replacing the stored one with its ID, but for its Views); a batch
	// with one also carries the event that tells of it (see ShareLink).
	ShareLink *ShareLink
	// Admit, when set, admits a run that the events make RUNNING only while its user has
	// fewer than Admit.Limit other RUNNING runs (across every replica sharing the store);
	// the batch fails with ERATELIMIT, writing nothing, otherwise.
	Admit *Admission
	// Spend, when set, is what the session's runs spent since its last write (see
	// UsageStore): counted with the batch.
	Spend *Spend
	// Mark is what the service knew of the session before the batch, from which Derive
	// tells the session's user what the batch changes (Changes.Viewer and Hooks); nil
	// tells nothing (a batch of chunks alone).
	Mark *Mark

	// derived is Derive(Events), made once by the service for a batch it hands over
	// (see derive); nil for batches made elsewhere and for chunks only, whose changes are
	// derived when asked.
	derived *Changes
}

// Admission bounds the runs a user has RUNNING at once.
type Admission struct {
	UserID string
	RunID  string
	Limit  int
}

// Derive checks b (see Check) and returns the row changes of its events, as the
// package's Derive makes them: what a store applies when it writes b. For a batch the
// service made they are derived once, whoever asks.
func (b *Batch) Derive() (Changes, error) {
	if err := b.checkFace(); err != nil {
		return Changes{}, err
	}
	var ch Changes
	if b.derived != nil {
		ch = *b.derived
	} else {
		ch = Derive(b.Events)
		b.tell(&ch)
	}
	if err := b.checkRows(&ch); err != nil {
		return Changes{}, err
	}
	return ch, nil
}

// derive makes b's changes once, before the service hands b over, so that the store and
// the service share them; not for a batch of chunks only, which changes no row, tells
// nothing and whose derivation costs nothing.
func (b *Batch) derive() {
	if b.derived != nil || b.chunksOnly() {
		return
	}
	c := Derive(b.Events)
	b.tell(&c)
	b.derived = &c
}

// chunksOnly reports whether b writes nothing but chunk events (or nothing at all).
func (b *Batch) chunksOnly() bool {
	return b.Create == nil && !b.Delete && !slices.ContainsFunc(b.Events, func(e *Event) bool { return !e.Type.Chunky() })
}

// told returns what the batch told its user, as derived (nil for a batch of chunks).
func (b *Batch) told() (viewer []*ViewerEvent, hooks []*HookEvent) {
	if b.derived == nil {
		return nil, nil
	}
	return b.derived.Viewer, b.derived.Hooks
}

// Check reports what is wrong with b on its face, without the stored state: a missing
// session ID, a creation of another session, a deletion that writes anything else, events
// of another session or with Seqs that are not consecutive, an idempotency record of
// another session or without a user or key, rows without an ID or of another session.
// Such mistakes are the caller's bugs; every Store checks them (Derive does) before it
// writes anything.
func (b *Batch) Check() error {
	_, err := b.Derive()
	return err
}

// checkFace is Check without the rows.
func (b *Batch) checkFace() error {
	if b == nil {
		return fmt.Errorf("batch: nil batch")
	}
	if b.SessionID == "" {
		return fmt.Errorf("batch: batch without a session ID")
	}
	if b.Delete {
		if b.Create != nil || len(b.Events) > 0 || b.Idempotency != nil || b.Admit != nil || b.Spend != nil || b.ShareLink != nil {
			return fmt.Errorf("batch: a batch that deletes session %s must write nothing else", b.SessionID)
		}
		return nil
	}
	if b.Create != nil && b.Create.ID != b.SessionID {
		return fmt.Errorf("batch: creation of session %q in a batch for session %s", b.Create.ID, b.SessionID)
	}
	for i, e := range b.Events {
		if e == nil {
			return fmt.Errorf("batch: nil event")
		}
		if e.SessionID != "" && e.SessionID != b.SessionID {
			return fmt.Errorf("batch: event of session %s in a batch for session %s", e.SessionID, b.SessionID)
		}
		if e.Seq < 1 || (i > 0 && e.Seq != b.Events[i-1].Seq+1) {
			return fmt.Errorf("batch: event sequence numbers must be consecutive and positive (event %d has %d)", i, e.Seq)
		}
	}
	if b.Create != nil && len(b.Events) > 0 && b.Events[0].Seq != 1 {
		return fmt.Errorf("batch: the log of a new session starts at 1, not %d", b.Events[0].Seq)
	}
	if r := b.Idempotency; r != nil {
		if r.UserID == "" || r.Key == "" {
			return fmt.Errorf("batch: idempotency record without a user or key")
		}
		if r.SessionID != b.SessionID {
			return fmt.Errorf("batch: idempotency record of session %s in a batch for session %s", r.SessionID, b.SessionID)
		}
	}
	if b.Create == nil && len(b.Events) == 0 && b.Idempotency != nil {
		return fmt.Errorf("batch: an idempotency record without events")
	}
	if l := b.ShareLink; l != nil {
		if l.ID == "" || l.SessionID != b.SessionID || len(l.Hash) != sha256.Size {
			return fmt.Errorf("batch: a share link needs an ID, the batch's session and a SHA-256 hash")
		}
		if len(b.Events) == 0 {
			return fmt.Errorf("batch: a share link without the event that tells of it")
		}
	}
	if a := b.Admit; a != nil && (a.UserID == "" || a.RunID == "" || a.Limit < 1) {
		return fmt.Errorf("batch: an admission needs a user, a run and a limit ≥ 1")
	}
	if sp := b.Spend; sp != nil && (sp.UserID == "" || sp.Period == "" || sp.Usage.InputTokens < 0 || sp.Usage.OutputTokens < 0) {
		return fmt.Errorf("batch: a spend needs a user, a period and counts ≥ 0")
	}
	return nil
}

// checkRows checks that every row ch changes has an ID and belongs to b's session.
func (b *Batch) checkRows(ch *Changes) error {
	check := func(id, session string) error {
		if id == "" {
			return fmt.Errorf("batch: a row without an ID")
		}
		if session != b.SessionID {
			return fmt.Errorf("batch: row %s of session %q in a batch for session %s", id, session, b.SessionID)
		}
		return nil
	}
	for _, m := range ch.Messages {
		if err := check(m.ID, m.SessionID); err != nil {
			return err
		}
	}
	for _, r := range ch.Runs {
		if err := check(r.ID, r.SessionID); err != nil {
			return err
		}
	}
	for _, q := range ch.Questions {
		if err := check(q.ID, q.SessionID); err != nil {
			return err
		}
	}
	for _, tc := range ch.ToolCalls {
		if err := check(tc.ID, tc.SessionID); err != nil {
			return err
		}
	}
	return nil
}

// Empty reports whether the batch writes nothing.
func (b *Batch) Empty() bool {
	return b.Create == nil && !b.Delete && len(b.Events) == 0 && b.Idempotency == nil && b.Admit == nil && b.Spend == nil
}

// PrevSeq is the Seq the batch's events follow (0 for a batch without events).
func (b *Batch) PrevSeq() int64 {
	if len(b.Events) == 0 {
		return 0
	}
	return b.Events[0].Seq - 1
}

// Compaction names one finished stream whose chunk events Store.Compact folds: those of
// session SessionID with Event.Key == Key, from Seq FromSeq on.
type Compaction struct {
	SessionID, Key string
	FromSeq        int64
	// Prepared says that Folded is the folding the service made itself from the events it
	// held (Coalesce of the session's log from FromSeq, as it held it in memory: events
	// made durable, in order), which may be empty. A store may write Folded without
	// reading the events back once it finds every folded run whole: each Seq from the
	// run's first (its CoalescedFrom) to its last still in the log, none folded or dropped
	// since. Otherwise it folds from what it reads, as without Prepared.
	Prepared bool
	Folded   []*Event
}

// PreparedInRange reports whether c is Prepared with each folded run inside the stream:
// its first Seq (CoalescedFrom) at FromSeq or after, and before its last. Only then may a
// store go on to check that the runs are whole.
func (c Compaction) PreparedInRange() bool {
	if !c.Prepared {
		return false
	}
	for _, e := range c.Folded {
		if e.CoalescedFrom < c.FromSeq || e.CoalescedFrom >= e.Seq {
			return false
		}
	}
	return true
}

// Coordinator is what a Store shared by several replicas (PostgreSQL) offers to
// coordinate them: which replicas live, and which runs each owns (Run.Owner). A replica
// heartbeats while it lives; the active runs of a replica whose heartbeat lapsed are taken
// over by a live one. Single-process stores do not implement it.
type Coordinator interface {
	// Heartbeat records that replica id lives until until (later heartbeats move it), and
	// returns the IDs of every replica alive at now, id included.
	Heartbeat(ctx context.Context, id string, now, until time.Time) (live []string, err error)
	// Leave ends replica id's life at once, so that others take its runs over without
	// waiting for its heartbeat to lapse.
	Leave(ctx context.Context, id string) error
	// ClaimRuns makes id the owner of every active run (QUEUED, RUNNING,
	// WAITING_FOR_INPUT) whose owner is not alive at now, and returns those runs, oldest
	// first. Two replicas claiming at once never both get a run.
	ClaimRuns(ctx context.Context, id string, now time.Time) ([]*Run, error)
	// ActiveRun returns the session's oldest active run; ENOTFOUND when it has none.
	ActiveRun(ctx context.Context, sessionID string) (*Run, error)
}

// SoleWriter is an ability of a Store that only one process writes (an SQLite file, the
// process's memory). SoleWriter reports whether that holds for this store: the service
// then trusts what it holds in memory of a session, since nobody else changes it, and
// reads the store less: a session's row and a run's history come from memory. A store
// without the ability, or that answers false, is read every time (see Service: "Processes
// sharing a store").
type SoleWriter interface {
	SoleWriter() bool
}

// MemoryReleaser is an ability of a Store that holds caches it can give back (SQLite's
// page caches). ReleaseMemory gives back what they hold beyond what is in use; they are
// read again from the storage afterwards.
type MemoryReleaser interface {
	ReleaseMemory(ctx context.Context) error
}

// SecretKeeper is an ability of a Store that can keep secrets with the data they protect
// (SQLite and PostgreSQL keep them in the database, shared by replicas). Secret returns
// the secret kept under name, made with gen and kept the first time it is asked for; of
// several processes asking at once, every one gets the same secret.
type SecretKeeper interface {
	Secret(ctx context.Context, name string, gen func() ([]byte, error)) ([]byte, error)
}

// ReplayGuard is an ability of a Store shared by replicas (PostgreSQL): it remembers the
// IDs of the messages they took from their Cluster, across their restarts, so that a
// message captured on the way and sent again is known for a replay by any of them.
// FirstSeen records id, to be remembered at least until until, and reports whether it is
// new: false when this process or another sharing the store recorded it before (a record
// may be forgotten once its until has passed). Of several processes recording one id at
// once, one alone gets true. An error (EUNAVAILABLE when the storage cannot be reached)
// says it cannot tell: the caller must not take the message.
type ReplayGuard interface {
	FirstSeen(ctx context.Context, id []byte, until time.Time) (bool, error)
}

// SessionPosition is a place in a user's session list.
type SessionPosition struct {
	UpdatedAt time.Time
	ID        string
}

// MessagePage selects part of a branch ordered by Seq. After and Before bound the page
// whenever they are set (> 0). With Last set it takes the last Last messages of the
// bounded range, otherwise the first First. The result is always in ascending Seq order.
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
