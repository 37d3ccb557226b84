package sqlite

// This file holds every SQL statement of the package (with queries_schedules.go, those of
// budgets and schedules), the argument lists that go with the writes, and one typed scan
// helper per row type. Nothing else in the package spells SQL or scans a row by hand.

import (
	"encoding/json"
	"strings"

	"github.com/talkgraph/talkgraph/service"
)

// Sessions.

// sessionCols are the columns of a session row; the derived LastSeq follows them in reads.
const sessionCols = `id, user_id, title, settings, created_at, updated_at, unread`

// lastSeqOf is the Seq of a session's last event, 0 before any: the log is the truth.
const lastSeqOf = `(SELECT coalesce(max(seq), 0) FROM events WHERE events.session_id = sessions.id)`

const (
	qSession     = `SELECT ` + sessionCols + `, ` + lastSeqOf + ` FROM sessions WHERE id = ?`
	qSessions    = `SELECT ` + sessionCols + `, ` + lastSeqOf + ` FROM sessions WHERE user_id = ? ORDER BY updated_at DESC, id DESC LIMIT ?`
	qSessionsAft = `SELECT ` + sessionCols + `, ` + lastSeqOf + ` FROM sessions WHERE user_id = ? AND (updated_at, id) < (?, ?)
		ORDER BY updated_at DESC, id DESC LIMIT ?`
	// qSessionLast reads the Seq of a session's last event; no row when it does not exist.
	qSessionLast   = `SELECT ` + lastSeqOf + ` FROM sessions WHERE id = ?`
	qInsertSession = `INSERT INTO sessions (` + sessionCols + `, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	// qGrowSession adds to a session's weight against its user's quota and moves its
	// activity time forward (pass '' to leave it).
	qGrowSession = `UPDATE sessions SET bytes = bytes + ?, updated_at = max(updated_at, ?) WHERE id = ?`
	// qFootprint counts a user's sessions and their weight.
	qFootprint = `SELECT count(*), coalesce(sum(bytes), 0) FROM sessions WHERE user_id = ?`
	// qUpdateSession applies a SessionUpdated snapshot, with what the session grew by, and
	// the latest activity after it (the snapshot's own time when none).
	qUpdateSession = `UPDATE sessions SET bytes = bytes + ?, title = ?, settings = ?, updated_at = max(?, ?) WHERE id = ?`
	qDeleteSession = `DELETE FROM sessions WHERE id = ?`
	// qSetUnread sets a session's unread flag as Changes.Unread says.
	qSetUnread = `UPDATE sessions SET unread = ? WHERE id = ?`
)

func sessionArgs(s *service.TalkSession) ([]any, error) {
	settings, err := json.Marshal(s.Settings)
	if err != nil {
		return nil, err
	}
	return []any{s.ID, s.UserID, s.Title, string(settings), dbTime(s.CreatedAt), dbTime(s.UpdatedAt), s.Unread, s.Size()}, nil
}

func scanSession(sc scanner) (*service.TalkSession, error) {
	var s service.TalkSession
	err := sc.Scan(&s.ID, &s.UserID, &s.Title, jsonCol{&s.Settings}, timeCol{&s.CreatedAt}, timeCol{&s.UpdatedAt}, &s.Unread, &s.LastSeq)
	return &s, err
}

// Messages.

const messageCols = `id, session_id, seq, role, kind, content, status, run_id, question_id, created_at, error,
	parent_id, on_branch`

const (
	qMessage = `SELECT ` + messageCols + ` FROM messages WHERE id = ?`
	// Unset bounds are passed as the extremes of int64.
	// The current branch is one range of the partial index messages_on_branch.
	qMessagesFirst = `SELECT ` + messageCols + ` FROM messages WHERE session_id = ? AND seq > ? AND seq < ?
		AND on_branch = 1 ORDER BY seq, id LIMIT ?`
	qMessagesLast = `SELECT ` + messageCols + ` FROM messages WHERE session_id = ? AND seq > ? AND seq < ?
		AND on_branch = 1 ORDER BY seq DESC, id DESC LIMIT ?`
	qChildren = `SELECT ` + messageCols + ` FROM messages WHERE session_id = ? AND parent_id = ?
		ORDER BY seq, id LIMIT ?`
	qCountMessages = `SELECT count(*) FROM messages WHERE session_id = ?`
	// qSwitchBranch puts the messages named by a JSON array on the current branch (1) or
	// takes them off (0).
	qSwitchBranch = `UPDATE messages SET on_branch = ? WHERE session_id = ? AND id IN (SELECT value FROM json_each(?))`
	// The WHERE of each upsert refuses to move a row to another session: nothing changes
	// then, which the caller sees as fewer rows affected than sent. A stored message keeps
	// its parent and whether it is on the branch (see service.Store.Append).
	upsertMessageTail = `ON CONFLICT (id) DO UPDATE SET seq = excluded.seq,
		role = excluded.role, kind = excluded.kind, content = excluded.content, status = excluded.status,
		run_id = excluded.run_id, question_id = excluded.question_id, created_at = excluded.created_at,
		error = excluded.error
		WHERE messages.session_id = excluded.session_id`
	// qMessageSession reads the session a message belongs to.
	qMessageSession = `SELECT session_id FROM messages WHERE id = ?`
)

// qUpsertMessages upserts n messages.
var qUpsertMessages = multiRow(`INSERT INTO messages (`+messageCols+`)`, 13, upsertMessageTail)

func messageArgs(m *service.Message) []any {
	return []any{m.ID, m.SessionID, m.Seq, string(m.Role), string(m.Kind), m.Content, string(m.Status),
		m.RunID, m.QuestionID, dbTime(m.CreatedAt), m.Error, m.ParentID, !m.OffBranch}
}

func scanMessage(sc scanner) (*service.Message, error) {
	var m service.Message
	var on bool
	err := sc.Scan(&m.ID, &m.SessionID, &m.Seq, &m.Role, &m.Kind, &m.Content, &m.Status, &m.RunID, &m.QuestionID,
		timeCol{&m.CreatedAt}, &m.Error, &m.ParentID, &on)
	m.OffBranch = !on
	return &m, err
}

// Runs.

const runCols = `id, session_id, user_id, status, error, agent, created_at, started_at, finished_at, usage, owner,
	reply_to, budget`

const (
	qRun = `SELECT ` + runCols + ` FROM runs WHERE id = ?`
	// qRunningOfUser counts a user's RUNNING runs other than one.
	qRunningOfUser = `SELECT count(*) FROM runs WHERE user_id = ? AND status = 'RUNNING' AND id <> ?`
	// The statuses come as one JSON array.
	qRunsByStatus = `SELECT ` + runCols + ` FROM runs WHERE status IN (SELECT value FROM json_each(?))
		ORDER BY created_at, id`
	qSessionRuns = `SELECT ` + runCols + ` FROM runs WHERE session_id = ? AND status IN (SELECT value FROM json_each(?))
		ORDER BY created_at, id`
	upsertRunTail = `ON CONFLICT (id) DO UPDATE SET user_id = excluded.user_id, status = excluded.status,
		error = excluded.error, agent = excluded.agent, created_at = excluded.created_at,
		started_at = excluded.started_at, finished_at = excluded.finished_at, usage = excluded.usage,
		owner = excluded.owner, reply_to = excluded.reply_to, budget = excluded.budget
		WHERE runs.session_id = excluded.session_id`
	qRunSession = `SELECT session_id FROM runs WHERE id = ?`
)

// qUpsertRuns upserts n runs.
var qUpsertRuns = multiRow(`INSERT INTO runs (`+runCols+`)`, 13, upsertRunTail)

func runArgs(r *service.Run) []any {
	var usage any // NULL when none was reported
	if r.Usage != nil {
		b, _ := json.Marshal(r.Usage) // a struct of numbers always encodes
		usage = string(b)
	}
	return []any{r.ID, r.SessionID, r.UserID, string(r.Status), r.Error, r.Agent, dbTime(r.CreatedAt),
		dbNullTime(r.StartedAt), dbNullTime(r.FinishedAt), usage, r.Owner, r.ReplyTo, string(r.Budget)}
}

func scanRun(sc scanner) (*service.Run, error) {
	var r service.Run
	err := sc.Scan(&r.ID, &r.SessionID, &r.UserID, &r.Status, &r.Error, &r.Agent, timeCol{&r.CreatedAt},
		nullTimeCol{&r.StartedAt}, nullTimeCol{&r.FinishedAt}, jsonCol{&r.Usage}, &r.Owner, &r.ReplyTo, &r.Budget)
	return &r, err
}

// Questions.

const questionCols = `id, run_id, session_id, prompt, choices, answer, asked_at, answered_at, withdrawn,
	multiple, answer_schema, expires_at, withdrawn_reason, tool_call_id`

const (
	qQuestion = `SELECT ` + questionCols + ` FROM questions WHERE id = ?`
	// The IDs come as one JSON array.
	qQuestions = `SELECT ` + questionCols + ` FROM questions WHERE id IN (SELECT value FROM json_each(?))`
	// qWithdrawQuestions withdraws the unanswered questions of a run that ended (see
	// service.Changes.Withdraws).
	qWithdrawQuestions = `UPDATE questions SET withdrawn = 1 WHERE run_id = ? AND session_id = ? AND answer IS NULL`
	upsertQuestionTail = `ON CONFLICT (id) DO UPDATE SET run_id = excluded.run_id, prompt = excluded.prompt,
		choices = excluded.choices, answer = excluded.answer, asked_at = excluded.asked_at,
		answered_at = excluded.answered_at, withdrawn = excluded.withdrawn, multiple = excluded.multiple,
		answer_schema = excluded.answer_schema, expires_at = excluded.expires_at,
		withdrawn_reason = excluded.withdrawn_reason, tool_call_id = excluded.tool_call_id
		WHERE questions.session_id = excluded.session_id`
	qQuestionSession = `SELECT session_id FROM questions WHERE id = ?`
)

// qUpsertQuestions upserts n questions.
var qUpsertQuestions = multiRow(`INSERT INTO questions (`+questionCols+`)`, 14, upsertQuestionTail)

func questionArgs(q *service.Question) ([]any, error) {
	var choices any // NULL for nil, so that nil and empty stay apart
	if q.Choices != nil {
		b, err := json.Marshal(q.Choices)
		if err != nil {
			return nil, err
		}
		choices = string(b)
	}
	return []any{q.ID, q.RunID, q.SessionID, q.Prompt, choices, dbNullString(q.Answer), dbTime(q.AskedAt),
		dbNullTime(q.AnsweredAt), q.Withdrawn, q.Multiple, q.AnswerSchema, dbNullTime(q.ExpiresAt),
		q.WithdrawnReason, q.ToolCallID}, nil
}

func scanQuestion(sc scanner) (*service.Question, error) {
	var q service.Question
	err := sc.Scan(&q.ID, &q.RunID, &q.SessionID, &q.Prompt, jsonCol{&q.Choices}, &q.Answer, timeCol{&q.AskedAt},
		nullTimeCol{&q.AnsweredAt}, &q.Withdrawn, &q.Multiple, &q.AnswerSchema, nullTimeCol{&q.ExpiresAt},
		&q.WithdrawnReason, &q.ToolCallID)
	return &q, err
}

// Tool calls.

const toolCallCols = `id, run_id, session_id, message_id, name, arguments, output, result, error, status,
	started_at, finished_at, call_id, approval`

const (
	// The message IDs come as one JSON array.
	qToolCalls = `SELECT ` + toolCallCols + ` FROM tool_calls
		WHERE message_id IN (SELECT value FROM json_each(?)) ORDER BY started_at, id`
	upsertToolCallTail = `ON CONFLICT (id) DO UPDATE SET run_id = excluded.run_id, message_id = excluded.message_id,
		name = excluded.name, arguments = excluded.arguments, output = excluded.output,
		result = excluded.result, error = excluded.error, status = excluded.status,
		started_at = excluded.started_at, finished_at = excluded.finished_at, call_id = excluded.call_id,
		approval = excluded.approval
		WHERE tool_calls.session_id = excluded.session_id`
	qToolCallSession = `SELECT session_id FROM tool_calls WHERE id = ?`
	qToolCall        = `SELECT ` + toolCallCols + ` FROM tool_calls WHERE id = ?`
)

// qUpsertToolCalls upserts n tool calls.
var qUpsertToolCalls = multiRow(`INSERT INTO tool_calls (`+toolCallCols+`)`, 14, upsertToolCallTail)

func toolCallArgs(tc *service.ToolCall) ([]any, error) {
	var approval any // NULL for none
	if tc.Approval != nil {
		b, err := json.Marshal(tc.Approval.UTC())
		if err != nil {
			return nil, err
		}
		approval = string(b)
	}
	return []any{tc.ID, tc.RunID, tc.SessionID, tc.MessageID, tc.Name, tc.Arguments, tc.Output,
		dbNullString(tc.Result), dbNullString(tc.Error), string(tc.Status), dbTime(tc.StartedAt),
		dbNullTime(tc.FinishedAt), tc.CallID, approval}, nil
}

func scanToolCall(sc scanner) (*service.ToolCall, error) {
	var tc service.ToolCall
	err := sc.Scan(&tc.ID, &tc.RunID, &tc.SessionID, &tc.MessageID, &tc.Name, &tc.Arguments, &tc.Output,
		&tc.Result, &tc.Error, &tc.Status, timeCol{&tc.StartedAt}, nullTimeCol{&tc.FinishedAt}, &tc.CallID,
		jsonCol{&tc.Approval})
	return &tc, err
}

// Events.

const eventCols = `session_id, seq, type, at, key, message_id, delta, delta_offset, coalesced_from,
	message, run, question, tool_call, session, branch`

const (
	qEvents = `SELECT ` + eventCols + ` FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`
	// qChunks reads what compaction needs of a session's events from a Seq on.
	qChunks = `SELECT seq, type, key, delta, delta_offset, coalesced_from FROM events
		WHERE session_id = ? AND seq >= ? ORDER BY seq`
	// qCountEvents counts a session's events in a range of Seqs [from, to] (on the log's
	// key alone).
	qCountEvents = `SELECT count(*) FROM events WHERE session_id = ? AND seq >= ? AND seq <= ?`
	// qDropEvents deletes the events of a session in a range of Seqs [from, to).
	qDropEvents = `DELETE FROM events WHERE session_id = ? AND seq >= ? AND seq < ?`
	// qRewriteEvent replaces the event at its Seq (for compaction).
	qRewriteEvent = `UPDATE events SET delta = ?3, delta_offset = ?4, coalesced_from = ?5 WHERE session_id = ?1 AND seq = ?2`
)

// multiRow returns the text of an INSERT of n rows of cols columns (head, the VALUES, then
// tail) for each n: built once for the sizes of rowBatchSizes, the only ones the writes
// use, rather than at every write (a statement of 512 rows is some 20 KB of text).
func multiRow(head string, cols int, tail string) func(n int) string {
	built := make(map[int]string, len(rowBatchSizes))
	for _, n := range rowBatchSizes {
		built[n] = multiRowText(head, cols, n, tail)
	}
	return func(n int) string {
		if q, ok := built[n]; ok {
			return q
		}
		return multiRowText(head, cols, n, tail)
	}
}

func multiRowText(head string, cols, n int, tail string) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	var b strings.Builder
	b.WriteString(head)
	b.WriteString(" VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	if tail != "" {
		b.WriteString(" ")
		b.WriteString(tail)
	}
	return b.String()
}

// rowBatchSizes are the row counts of the multi-row writes, largest first (each is a
// statement prepared once).
var rowBatchSizes = []int{512, 64, 8, 1}

// qInsertEvents inserts n events. Append has checked that none is there yet; OR IGNORE
// spares SQLite a statement journal for each insert (Append checks the count inserted).
var qInsertEvents = multiRow(`INSERT OR IGNORE INTO events (`+eventCols+`)`, 15, "")

// eventArgs encodes e, an event of session sessionID, for qInsertEvent; payloads are
// stored as JSON.
func eventArgs(e *service.Event, sessionID string) ([]any, error) {
	payloads := []any{e.Message, e.Run, e.Question, e.ToolCall, e.Session, e.Branch}
	isNil := []bool{e.Message == nil, e.Run == nil, e.Question == nil, e.ToolCall == nil, e.Session == nil, e.Branch == nil}
	args := make([]any, 0, 16)
	args = append(args, sessionID, e.Seq, string(e.Type), dbTime(e.At), e.Key, e.MessageID, e.Delta, e.Offset,
		e.CoalescedFrom)
	for i, p := range payloads {
		if isNil[i] {
			args = append(args, nil)
			continue
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		args = append(args, string(b))
	}
	return args, nil
}

func scanEvent(sc scanner) (*service.Event, error) {
	var e service.Event
	err := sc.Scan(&e.SessionID, &e.Seq, &e.Type, timeCol{&e.At}, &e.Key, &e.MessageID, &e.Delta, &e.Offset,
		&e.CoalescedFrom, jsonCol{&e.Message}, jsonCol{&e.Run}, jsonCol{&e.Question}, jsonCol{&e.ToolCall},
		jsonCol{&e.Session}, jsonCol{&e.Branch})
	if err != nil {
		return nil, err
	}
	// JSON keeps the instant but not the location; return UTC as everywhere else.
	if m := e.Message; m != nil {
		m.CreatedAt = m.CreatedAt.UTC()
	}
	if r := e.Run; r != nil {
		r.CreatedAt = r.CreatedAt.UTC()
		utcPtr(r.StartedAt)
		utcPtr(r.FinishedAt)
	}
	if q := e.Question; q != nil {
		q.AskedAt = q.AskedAt.UTC()
		utcPtr(q.AnsweredAt)
	}
	if tc := e.ToolCall; tc != nil {
		tc.StartedAt = tc.StartedAt.UTC()
		utcPtr(tc.FinishedAt)
	}
	if s := e.Session; s != nil {
		s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
	}
	return &e, nil
}

// Idempotency records.

const idemCols = `user_id, idem_key, session_id, message_id, run_id, created_at`

const (
	qIdempotency = `SELECT ` + idemCols + ` FROM idempotency WHERE user_id = ? AND idem_key = ?`
	// No row is inserted when the key exists: the caller turns that into ECONFLICT.
	qInsertIdempotency = `INSERT INTO idempotency (` + idemCols + `) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
)

func idempotencyArgs(r *service.IdempotencyRecord) []any {
	return []any{r.UserID, r.Key, r.SessionID, r.MessageID, r.RunID, dbTime(r.CreatedAt)}
}

func scanIdempotency(sc scanner) (*service.IdempotencyRecord, error) {
	var r service.IdempotencyRecord
	err := sc.Scan(&r.UserID, &r.Key, &r.SessionID, &r.MessageID, &r.RunID, timeCol{&r.CreatedAt})
	return &r, err
}

// Meta.

const (
	qMeta       = `SELECT value FROM meta WHERE name = ?`
	qInsertMeta = `INSERT INTO meta (name, value) VALUES (?, ?)`
	// qPing writes 64 KiB, which needs free pages; Ping rolls it back.
	qPing = `INSERT INTO meta (name, value) VALUES ('ping', zeroblob(65536)) ON CONFLICT (name) DO UPDATE SET value = zeroblob(65536)`
)

// Database settings.

const (
	qJournalMode = `PRAGMA journal_mode`
	qCheckpoint  = `PRAGMA wal_checkpoint(PASSIVE)`
)

// Deleting a session deletes every row that belongs to it, table by table.
const (
	qDeleteMessages    = `DELETE FROM messages WHERE session_id = ?`
	qDeleteRuns        = `DELETE FROM runs WHERE session_id = ?`
	qDeleteQuestions   = `DELETE FROM questions WHERE session_id = ?`
	qDeleteToolCalls   = `DELETE FROM tool_calls WHERE session_id = ?`
	qDeleteEvents      = `DELETE FROM events WHERE session_id = ?`
	qDeleteIdempotency = `DELETE FROM idempotency WHERE session_id = ?`
	qDeleteThreads     = `DELETE FROM agui_threads WHERE session_id = ?`
)

// AG-UI threads (Store.Thread, Store.BindThread).
const (
	qThread     = `SELECT session_id FROM agui_threads WHERE user_id = ? AND thread_id = ?`
	qBindThread = `INSERT INTO agui_threads (user_id, thread_id, session_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`
)

// writes are the statements Append and Compact run, prepared once on the writer
// connection.
var writes = []string{
	qInsertSession, qUpdateSession, qDeleteSession, qGrowSession,
	qRewriteEvent, qDropEvents, qInsertIdempotency, qDeleteMessages, qDeleteRuns,
	qDeleteQuestions, qDeleteToolCalls, qDeleteEvents, qDeleteIdempotency, qWithdrawQuestions,
	qSwitchBranch, qPutShareLink, qDeleteShareLinks, qDeleteThreads,
	qSetUnread, qViewerLast, qWebhooksToTell, qCountWebhooks, qDeleteDeliveries,
}

func init() {
	for _, n := range rowBatchSizes {
		writes = append(writes, qInsertEvents(n), qUpsertMessages(n), qUpsertRuns(n), qUpsertQuestions(n), qUpsertToolCalls(n),
			qInsertViewerEvents(n), qInsertDeliveries(n))
	}
}

// scanChunk scans qChunks: an event with what folding needs.
func scanChunk(sc scanner) (*service.Event, error) {
	var e service.Event
	err := sc.Scan(&e.Seq, &e.Type, &e.Key, &e.Delta, &e.Offset, &e.CoalescedFrom)
	return &e, err
}

// reads are the queries of the read pool, prepared once.
var reads = []string{
	qSession, qSessions, qSessionsAft, qMessage, qMessagesFirst, qMessagesLast, qRun, qRunsByStatus,
	qQuestion, qQuestions, qToolCalls, qToolCall, qEvents, qChunks, qCountEvents, qIdempotency, qFootprint,
	qChildren, qCountMessages, qSessionRuns, qShareLink, qShareLinkByID, qShareLinks, qThread,
	qViewerEvents, qViewerSeq, qWebhook, qWebhooks, qDelivery, qDeliveries, qDeliveriesAft, qAnyDue,
}
