package postgres

// This file holds every SQL statement of the package, the column lists that go with the
// multi-row writes, and one typed scan helper per row type. Nothing else in the package
// spells SQL or scans a row by hand.
//
// Writes of many rows pass one array per column and turn them back into rows with
// unnest($1::text[], $2::bigint[], …): one statement, prepared once per connection (pgx
// caches it), whatever the number of rows.

import (
	"encoding/json"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/talkgraph/talkgraph/service"
)

// Transactions and locks.

const (
	// qBegin opens Append's and Compact's transactions. READ COMMITTED is spelled out
	// because Append relies on it, whatever the server's default: each statement sees
	// what was committed before it began, so that the state read after the session rows
	// are locked is current.
	qBegin = `BEGIN ISOLATION LEVEL READ COMMITTED`
	// qTxID gives Append's transaction its ID (txid_current assigns one), and qTxStatus
	// tells whether it committed, when the connection broke before its COMMIT answered.
	qTxID     = `SELECT txid_current()`
	qTxStatus = `SELECT txid_status($1)`
	qCommit   = `COMMIT`
	qRollback = `ROLLBACK`

	// The advisory locks have two keys: the first, 1950810113 (0x74470001) for migrations
	// and 1950810114 for admissions, keeps them apart from anybody else's.

	// qLockMigrations serialises Open's migrations of one schema across replicas; held by
	// a session, it ends with it.
	qLockMigrations   = `SELECT pg_advisory_lock(1950810113, hashtext(coalesce(current_schema(), '')))`
	qUnlockMigrations = `SELECT pg_advisory_unlock(1950810113, hashtext(coalesce(current_schema(), '')))`
	// qLockAdmissions takes the admission lock of each user key, in the order given
	// (sorted, so that transactions never wait for each other in a circle).
	qLockAdmissions = `SELECT pg_advisory_xact_lock(1950810114, k) FROM unnest($1::int[]) AS k`
	// qLockSessions locks the session rows a call writes, in ID order (ORDER BY is applied
	// before the rows are locked), so that two replicas never deadlock.
	qLockSessions = `SELECT id FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`
	// qLockSession locks one session row (Compact).
	qLockSession = `SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`
)

// Append's reads, after the locks.

const (
	// qSessionStates returns each existing session of the call with the Seq of its last
	// event (the log is the truth: one backward probe of the events' primary key).
	qSessionStates = `SELECT s.id, coalesce((SELECT max(e.seq) FROM events e WHERE e.session_id = s.id), 0)
		FROM sessions s WHERE s.id = ANY($1::text[])`
	// qUsedKeys returns the idempotency keys of the call that are taken.
	qUsedKeys = `SELECT i.user_id, i.idem_key FROM idempotency i
		JOIN unnest($1::text[], $2::text[]) AS v (user_id, idem_key) ON i.user_id = v.user_id AND i.idem_key = v.idem_key`
	// qRunningRuns returns the RUNNING runs of the users that admit runs.
	qRunningRuns = `SELECT user_id, id, session_id FROM runs WHERE user_id = ANY($1::text[]) AND status = 'RUNNING'`
	// qForeignRows returns the rows of the call that exist in another session than the
	// batch that writes them: (table, ID, the session they belong to).
	qForeignRows = `SELECT 'message', t.id, t.session_id FROM messages t
			JOIN unnest($1::text[], $2::text[]) AS v (id, session_id) ON t.id = v.id AND t.session_id <> v.session_id
		UNION ALL SELECT 'run', t.id, t.session_id FROM runs t
			JOIN unnest($3::text[], $4::text[]) AS v (id, session_id) ON t.id = v.id AND t.session_id <> v.session_id
		UNION ALL SELECT 'question', t.id, t.session_id FROM questions t
			JOIN unnest($5::text[], $6::text[]) AS v (id, session_id) ON t.id = v.id AND t.session_id <> v.session_id
		UNION ALL SELECT 'tool call', t.id, t.session_id FROM tool_calls t
			JOIN unnest($7::text[], $8::text[]) AS v (id, session_id) ON t.id = v.id AND t.session_id <> v.session_id`
)

// Sessions.

const sessionCols = `id, user_id, title, settings, created_at, updated_at`

// lastSeqOf is the Seq of a session's last event, 0 before any.
const lastSeqOf = `coalesce((SELECT max(seq) FROM events WHERE events.session_id = sessions.id), 0)`

const (
	qSession     = `SELECT ` + sessionCols + `, ` + lastSeqOf + ` FROM sessions WHERE id = $1`
	qSessions    = `SELECT ` + sessionCols + `, ` + lastSeqOf + ` FROM sessions WHERE user_id = $1 ORDER BY updated_at DESC, id DESC LIMIT $2`
	qSessionsAft = `SELECT ` + sessionCols + `, ` + lastSeqOf + ` FROM sessions WHERE user_id = $1 AND (updated_at, id) < ($2, $3)
		ORDER BY updated_at DESC, id DESC LIMIT $4`
	qInsertSessions = `INSERT INTO sessions (` + sessionCols + `, bytes)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[])`
	// qGrowSessions adds to sessions' weight against their users' quotas.
	qGrowSessions = `UPDATE sessions s SET bytes = s.bytes + v.bytes
		FROM unnest($1::text[], $2::bigint[]) AS v (id, bytes) WHERE s.id = v.id`
	// qFootprint counts a user's sessions and their weight.
	qFootprint = `SELECT count(*), coalesce(sum(bytes), 0)::bigint FROM sessions WHERE user_id = $1`
	// qUpdateSessions applies SessionUpdated snapshots.
	qUpdateSessions = `UPDATE sessions s SET title = v.title, settings = v.settings, updated_at = v.updated_at
		FROM unnest($1::text[], $2::bytea[], $3::text[], $4::bigint[]) AS v (id, title, settings, updated_at)
		WHERE s.id = v.id`
	// qTouchSessions moves sessions' activity times forward.
	qTouchSessions = `UPDATE sessions s SET updated_at = greatest(s.updated_at, v.at)
		FROM unnest($1::text[], $2::bigint[]) AS v (id, at) WHERE s.id = v.id`
	qDeleteSessions = `DELETE FROM sessions WHERE id = ANY($1::text[])` // the rest goes by ON DELETE CASCADE
)

// sessionRows are the columns of qInsertSessions.
type sessionRows struct {
	id, userID         []string
	title              [][]byte
	settings           []string
	createdAt, updated []int64
	bytes              []int64 // the creation's Size and what its events add
}

func (r *sessionRows) add(s *service.TalkSession, settings string, bytes int64) {
	r.bytes = append(r.bytes, bytes)
	r.id = append(r.id, s.ID)
	r.userID = append(r.userID, s.UserID)
	r.title = append(r.title, dbText(s.Title))
	r.settings = append(r.settings, settings)
	r.createdAt = append(r.createdAt, dbTime(s.CreatedAt))
	r.updated = append(r.updated, dbTime(s.UpdatedAt))
}

func (r *sessionRows) args() []any {
	return []any{r.id, r.userID, pgtype.FlatArray[[]byte](r.title), r.settings, r.createdAt, r.updated, r.bytes}
}

// sessionUpdates are the columns of qUpdateSessions.
type sessionUpdates struct {
	id       []string
	title    [][]byte
	settings []string
	updated  []int64
}

func (r *sessionUpdates) add(id string, s *service.TalkSession, settings string) {
	r.id = append(r.id, id)
	r.title = append(r.title, dbText(s.Title))
	r.settings = append(r.settings, settings)
	r.updated = append(r.updated, dbTime(s.UpdatedAt))
}

func (r *sessionUpdates) args() []any {
	return []any{r.id, pgtype.FlatArray[[]byte](r.title), r.settings, r.updated}
}

func scanSession(row scanner) (*service.TalkSession, error) {
	var s service.TalkSession
	var settings []byte
	var created, updated int64
	err := row.Scan(&s.ID, &s.UserID, textCol{&s.Title}, &settings, &created, &updated, &s.LastSeq)
	if err != nil {
		return nil, err
	}
	s.CreatedAt, s.UpdatedAt = goTime(created), goTime(updated)
	return &s, json.Unmarshal(settings, &s.Settings)
}

// Messages.

const messageCols = `id, session_id, seq, role, kind, content, status, run_id, question_id, created_at, error,
	parent_id, on_branch`

const (
	qMessage = `SELECT ` + messageCols + ` FROM messages WHERE id = $1`
	// Unset bounds are passed as the extremes of int64.
	// The current branch is one range of the partial index messages_on_branch.
	qMessagesFirst = `SELECT ` + messageCols + ` FROM messages WHERE session_id = $1 AND seq > $2 AND seq < $3
		AND on_branch ORDER BY seq, id LIMIT $4`
	qMessagesLast = `SELECT ` + messageCols + ` FROM messages WHERE session_id = $1 AND seq > $2 AND seq < $3
		AND on_branch ORDER BY seq DESC, id DESC LIMIT $4`
	qChildren = `SELECT ` + messageCols + ` FROM messages WHERE session_id = $1 AND parent_id = $2
		ORDER BY seq, id LIMIT $3`
	qCountMessages = `SELECT count(*) FROM messages WHERE session_id = $1`
	// qSwitchBranch puts messages on the current branch or takes them off: (session, id,
	// on) triples.
	qSwitchBranch = `UPDATE messages m SET on_branch = v.on_branch
		FROM unnest($1::text[], $2::text[], $3::boolean[]) AS v (session_id, id, on_branch)
		WHERE m.id = v.id AND m.session_id = v.session_id`
	// The WHERE of each upsert refuses to move a row to another session: the row is left
	// alone then, and talkgraph_all_written fails the statement (see the migration).
	qUpsertMessages = `WITH w AS (
		INSERT INTO messages AS t (` + messageCols + `)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::bytea[], $7::text[],
			$8::text[], $9::text[], $10::bigint[], $11::bytea[], $13::text[], $14::boolean[])
		ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, role = excluded.role, kind = excluded.kind,
			content = excluded.content, status = excluded.status, run_id = excluded.run_id,
			question_id = excluded.question_id, created_at = excluded.created_at, error = excluded.error
		WHERE t.session_id = excluded.session_id
		RETURNING 1)
		SELECT talkgraph_all_written((SELECT count(*) FROM w), $12)`
)

// messageRows are the columns of qUpsertMessages.
type messageRows struct {
	id, sessionID             []string
	seq                       []int64
	role, kind                []string
	content                   [][]byte
	status, runID, questionID []string
	createdAt                 []int64
	errText                   [][]byte
	parentID                  []string
	onBranch                  []bool
}

func (r *messageRows) add(m *service.Message) {
	r.id = append(r.id, m.ID)
	r.sessionID = append(r.sessionID, m.SessionID)
	r.seq = append(r.seq, m.Seq)
	r.role = append(r.role, string(m.Role))
	r.kind = append(r.kind, string(m.Kind))
	r.content = append(r.content, dbText(m.Content))
	r.status = append(r.status, string(m.Status))
	r.runID = append(r.runID, m.RunID)
	r.questionID = append(r.questionID, m.QuestionID)
	r.createdAt = append(r.createdAt, dbTime(m.CreatedAt))
	r.errText = append(r.errText, dbText(m.Error))
	r.parentID = append(r.parentID, m.ParentID)
	r.onBranch = append(r.onBranch, !m.OffBranch)
}

func (r *messageRows) args() []any {
	return []any{r.id, r.sessionID, r.seq, r.role, r.kind, pgtype.FlatArray[[]byte](r.content), r.status, r.runID,
		r.questionID, r.createdAt, pgtype.FlatArray[[]byte](r.errText), int64(len(r.id)), r.parentID, r.onBranch}
}

func scanMessage(row scanner) (*service.Message, error) {
	var m service.Message
	var created int64
	var on bool
	err := row.Scan(&m.ID, &m.SessionID, &m.Seq, &m.Role, &m.Kind, textCol{&m.Content}, &m.Status, &m.RunID,
		&m.QuestionID, &created, textCol{&m.Error}, &m.ParentID, &on)
	m.CreatedAt, m.OffBranch = goTime(created), !on
	return &m, err
}

// Runs.

const runCols = `id, session_id, user_id, status, error, agent, created_at, started_at, finished_at, usage, owner,
	reply_to`

// activeStatuses are the statuses of runs that are not over.
const activeStatuses = `('QUEUED', 'RUNNING', 'WAITING_FOR_INPUT')`

const (
	qRun          = `SELECT ` + runCols + ` FROM runs WHERE id = $1`
	qRunsByStatus = `SELECT ` + runCols + ` FROM runs WHERE status = ANY($1::text[]) ORDER BY created_at, id`
	qSessionRuns  = `SELECT ` + runCols + ` FROM runs WHERE session_id = $1 AND status = ANY($2::text[])
		ORDER BY created_at, id`
	qUpsertRuns = `WITH w AS (
		INSERT INTO runs AS t (` + runCols + `)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::bigint[],
			$8::bigint[], $9::bigint[], $10::text[], $11::text[], $13::text[])
		ON CONFLICT (id) DO UPDATE SET user_id = excluded.user_id, status = excluded.status, error = excluded.error,
			agent = excluded.agent, created_at = excluded.created_at, started_at = excluded.started_at,
			finished_at = excluded.finished_at, usage = excluded.usage, owner = excluded.owner,
			reply_to = excluded.reply_to
		WHERE t.session_id = excluded.session_id
		RETURNING 1)
		SELECT talkgraph_all_written((SELECT count(*) FROM w), $12)`
)

// runRows are the columns of qUpsertRuns.
type runRows struct {
	id, sessionID, userID, status []string
	errText                       [][]byte
	agent                         []string
	createdAt                     []int64
	startedAt, finishedAt         []pgtype.Int8
	usage                         []pgtype.Text
	owner                         []string
	replyTo                       []string
}

// add adds r, with usage its Usage as JSON ("" for none).
func (rs *runRows) add(r *service.Run, usage string) {
	rs.id = append(rs.id, r.ID)
	rs.sessionID = append(rs.sessionID, r.SessionID)
	rs.userID = append(rs.userID, r.UserID)
	rs.status = append(rs.status, string(r.Status))
	rs.errText = append(rs.errText, dbText(r.Error))
	rs.agent = append(rs.agent, r.Agent)
	rs.createdAt = append(rs.createdAt, dbTime(r.CreatedAt))
	rs.startedAt = append(rs.startedAt, dbNullTime(r.StartedAt))
	rs.finishedAt = append(rs.finishedAt, dbNullTime(r.FinishedAt))
	rs.usage = append(rs.usage, pgtype.Text{String: usage, Valid: usage != ""})
	rs.owner = append(rs.owner, r.Owner)
	rs.replyTo = append(rs.replyTo, r.ReplyTo)
}

func (rs *runRows) args() []any {
	return []any{rs.id, rs.sessionID, rs.userID, rs.status, pgtype.FlatArray[[]byte](rs.errText), rs.agent, rs.createdAt,
		pgtype.FlatArray[pgtype.Int8](rs.startedAt), pgtype.FlatArray[pgtype.Int8](rs.finishedAt),
		pgtype.FlatArray[pgtype.Text](rs.usage), rs.owner, int64(len(rs.id)), rs.replyTo}
}

func scanRun(row scanner) (*service.Run, error) {
	var r service.Run
	var created int64
	var started, finished *int64
	var usage []byte
	err := row.Scan(&r.ID, &r.SessionID, &r.UserID, &r.Status, textCol{&r.Error}, &r.Agent, &created, &started,
		&finished, &usage, &r.Owner, &r.ReplyTo)
	if err != nil {
		return nil, err
	}
	r.CreatedAt, r.StartedAt, r.FinishedAt = goTime(created), goNullTime(started), goNullTime(finished)
	if usage != nil {
		err = json.Unmarshal(usage, &r.Usage)
	}
	return &r, err
}

// Questions.

const questionCols = `id, run_id, session_id, prompt, choices, answer, asked_at, answered_at, withdrawn,
	multiple, answer_schema, expires_at, withdrawn_reason, tool_call_id`

const (
	qQuestion  = `SELECT ` + questionCols + ` FROM questions WHERE id = $1`
	qQuestions = `SELECT ` + questionCols + ` FROM questions WHERE id = ANY($1::text[])`
	// qWithdrawQuestions withdraws the unanswered questions of runs that ended, given as
	// (run, session) pairs.
	qWithdrawQuestions = `UPDATE questions q SET withdrawn = true
		FROM unnest($1::text[], $2::text[]) AS v (run_id, session_id)
		WHERE q.run_id = v.run_id AND q.session_id = v.session_id AND q.answer IS NULL AND NOT q.withdrawn`
	qUpsertQuestions = `WITH w AS (
		INSERT INTO questions AS t (` + questionCols + `)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::bytea[], $7::bigint[],
			$8::bigint[], $9::boolean[], $10::boolean[], $11::bytea[], $12::bigint[], $13::text[], $14::text[])
		ON CONFLICT (id) DO UPDATE SET run_id = excluded.run_id, prompt = excluded.prompt, choices = excluded.choices,
			answer = excluded.answer, asked_at = excluded.asked_at, answered_at = excluded.answered_at,
			withdrawn = excluded.withdrawn, multiple = excluded.multiple, answer_schema = excluded.answer_schema,
			expires_at = excluded.expires_at, withdrawn_reason = excluded.withdrawn_reason,
			tool_call_id = excluded.tool_call_id
		WHERE t.session_id = excluded.session_id
		RETURNING 1)
		SELECT talkgraph_all_written((SELECT count(*) FROM w), $15)`
)

// questionRows are the columns of qUpsertQuestions.
type questionRows struct {
	id, runID, sessionID []string
	prompt               [][]byte
	choices              []pgtype.Text
	answer               [][]byte
	askedAt              []int64
	answeredAt           []pgtype.Int8
	withdrawn            []bool
	multiple             []bool
	answerSchema         [][]byte
	expiresAt            []pgtype.Int8
	withdrawnReason      []string
	toolCallID           []string
}

// add adds q, with choices its Choices as JSON ("" for nil).
func (r *questionRows) add(q *service.Question, choices string) {
	r.id = append(r.id, q.ID)
	r.runID = append(r.runID, q.RunID)
	r.sessionID = append(r.sessionID, q.SessionID)
	r.prompt = append(r.prompt, dbText(q.Prompt))
	r.choices = append(r.choices, pgtype.Text{String: choices, Valid: choices != ""})
	r.answer = append(r.answer, dbNullText(q.Answer))
	r.askedAt = append(r.askedAt, dbTime(q.AskedAt))
	r.answeredAt = append(r.answeredAt, dbNullTime(q.AnsweredAt))
	r.withdrawn = append(r.withdrawn, q.Withdrawn)
	r.multiple = append(r.multiple, q.Multiple)
	r.answerSchema = append(r.answerSchema, dbText(q.AnswerSchema))
	r.expiresAt = append(r.expiresAt, dbNullTime(q.ExpiresAt))
	r.withdrawnReason = append(r.withdrawnReason, q.WithdrawnReason)
	r.toolCallID = append(r.toolCallID, q.ToolCallID)
}

func (r *questionRows) args() []any {
	return []any{r.id, r.runID, r.sessionID, pgtype.FlatArray[[]byte](r.prompt), pgtype.FlatArray[pgtype.Text](r.choices),
		pgtype.FlatArray[[]byte](r.answer), r.askedAt, pgtype.FlatArray[pgtype.Int8](r.answeredAt), r.withdrawn,
		r.multiple, pgtype.FlatArray[[]byte](r.answerSchema), pgtype.FlatArray[pgtype.Int8](r.expiresAt),
		r.withdrawnReason, r.toolCallID, int64(len(r.id))}
}

func scanQuestion(row scanner) (*service.Question, error) {
	var q service.Question
	var choices []byte
	var asked int64
	var answered, expires *int64
	err := row.Scan(&q.ID, &q.RunID, &q.SessionID, textCol{&q.Prompt}, &choices, nullTextCol{&q.Answer}, &asked,
		&answered, &q.Withdrawn, &q.Multiple, textCol{&q.AnswerSchema}, &expires, &q.WithdrawnReason, &q.ToolCallID)
	if err != nil {
		return nil, err
	}
	q.AskedAt, q.AnsweredAt, q.ExpiresAt = goTime(asked), goNullTime(answered), goNullTime(expires)
	if choices != nil {
		err = json.Unmarshal(choices, &q.Choices)
	}
	return &q, err
}

// Tool calls.

const toolCallCols = `id, run_id, session_id, message_id, name, arguments, output, result, error, status,
	started_at, finished_at, call_id, approval`

const (
	qToolCalls       = `SELECT ` + toolCallCols + ` FROM tool_calls WHERE message_id = ANY($1::text[]) ORDER BY started_at, id`
	qToolCall        = `SELECT ` + toolCallCols + ` FROM tool_calls WHERE id = $1`
	qUpsertToolCalls = `WITH w AS (
		INSERT INTO tool_calls AS t (` + toolCallCols + `)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bytea[], $7::bytea[],
			$8::bytea[], $9::bytea[], $10::text[], $11::bigint[], $12::bigint[], $13::bytea[], $14::text[])
		ON CONFLICT (id) DO UPDATE SET run_id = excluded.run_id, message_id = excluded.message_id,
			name = excluded.name, arguments = excluded.arguments, output = excluded.output, result = excluded.result,
			error = excluded.error, status = excluded.status, started_at = excluded.started_at,
			finished_at = excluded.finished_at, call_id = excluded.call_id, approval = excluded.approval
		WHERE t.session_id = excluded.session_id
		RETURNING 1)
		SELECT talkgraph_all_written((SELECT count(*) FROM w), $15)`
)

// toolCallRows are the columns of qUpsertToolCalls.
type toolCallRows struct {
	id, runID, sessionID, messageID []string
	name, arguments, output         [][]byte
	result, errText                 [][]byte
	status                          []string
	startedAt                       []int64
	finishedAt                      []pgtype.Int8
	callID                          [][]byte
	approval                        []pgtype.Text // JSON; NULL when none was needed
}

func (r *toolCallRows) add(tc *service.ToolCall) {
	r.id = append(r.id, tc.ID)
	r.runID = append(r.runID, tc.RunID)
	r.sessionID = append(r.sessionID, tc.SessionID)
	r.messageID = append(r.messageID, tc.MessageID)
	r.name = append(r.name, dbText(tc.Name))
	r.arguments = append(r.arguments, dbText(tc.Arguments))
	r.output = append(r.output, dbText(tc.Output))
	r.result = append(r.result, dbNullText(tc.Result))
	r.errText = append(r.errText, dbNullText(tc.Error))
	r.status = append(r.status, string(tc.Status))
	r.startedAt = append(r.startedAt, dbTime(tc.StartedAt))
	r.finishedAt = append(r.finishedAt, dbNullTime(tc.FinishedAt))
	r.callID = append(r.callID, dbText(tc.CallID))
	var approval pgtype.Text
	if tc.Approval != nil {
		b, _ := json.Marshal(tc.Approval.UTC()) // a struct of strings and times: it encodes
		approval = pgtype.Text{String: string(b), Valid: true}
	}
	r.approval = append(r.approval, approval)
}

func (r *toolCallRows) args() []any {
	b := func(v [][]byte) any { return pgtype.FlatArray[[]byte](v) }
	return []any{r.id, r.runID, r.sessionID, r.messageID, b(r.name), b(r.arguments), b(r.output), b(r.result),
		b(r.errText), r.status, r.startedAt, pgtype.FlatArray[pgtype.Int8](r.finishedAt), b(r.callID),
		pgtype.FlatArray[pgtype.Text](r.approval), int64(len(r.id))}
}

func scanToolCall(row scanner) (*service.ToolCall, error) {
	var tc service.ToolCall
	var started int64
	var finished *int64
	var approval *string
	err := row.Scan(&tc.ID, &tc.RunID, &tc.SessionID, &tc.MessageID, textCol{&tc.Name}, textCol{&tc.Arguments},
		textCol{&tc.Output}, nullTextCol{&tc.Result}, nullTextCol{&tc.Error}, &tc.Status, &started, &finished,
		textCol{&tc.CallID}, &approval)
	tc.StartedAt, tc.FinishedAt = goTime(started), goNullTime(finished)
	if err == nil && approval != nil {
		err = json.Unmarshal([]byte(*approval), &tc.Approval)
	}
	return &tc, err
}

// Events.

const eventCols = `session_id, seq, type, at, key, message_id, delta, delta_offset, coalesced_from,
	message, run, question, tool_call, session, branch`

const (
	qEvents       = `SELECT ` + eventCols + ` FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`
	qInsertEvents = `INSERT INTO events (` + eventCols + `)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bytea[],
			$8::bigint[], $9::bigint[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[])`
	// qRewriteEvents replaces events at their Seqs (for compaction).
	qRewriteEvents = `UPDATE events e SET delta = v.delta, delta_offset = v.delta_offset, coalesced_from = v.coalesced_from
		FROM unnest($2::bigint[], $3::bytea[], $4::bigint[], $5::bigint[]) AS v (seq, delta, delta_offset, coalesced_from)
		WHERE e.session_id = $1 AND e.seq = v.seq`
	qDropEvents = `DELETE FROM events WHERE session_id = $1 AND seq = ANY($2::bigint[])`
)

// eventRow is one event, encoded once per Append call: its payloads are JSON.
type eventRow struct {
	seq, at, offset, coalescedFrom int64
	typ, key, messageID            string
	delta                          []byte
	payloads                       [6]pgtype.Text // message, run, question, tool call, session, branch
}

// encodeEvent encodes e for qInsertEvents.
func encodeEvent(e *service.Event) (eventRow, error) {
	r := eventRow{seq: e.Seq, at: dbTime(e.At), offset: int64(e.Offset), coalescedFrom: e.CoalescedFrom,
		typ: string(e.Type), key: e.Key, messageID: e.MessageID, delta: dbText(e.Delta)}
	for i, p := range []any{e.Message, e.Run, e.Question, e.ToolCall, e.Session, e.Branch} {
		if isNil := [...]bool{e.Message == nil, e.Run == nil, e.Question == nil, e.ToolCall == nil, e.Session == nil, e.Branch == nil}[i]; isNil {
			continue
		}
		b, err := json.Marshal(p)
		if err != nil {
			return r, err
		}
		r.payloads[i] = pgtype.Text{String: string(b), Valid: true}
	}
	return r, nil
}

// eventRows are the columns of qInsertEvents.
type eventRows struct {
	sessionID                        []string
	seq                              []int64
	typ                              []string
	at                               []int64
	key, messageID                   []string
	delta                            [][]byte
	offset, coalescedFrom            []int64
	message, run, question, tc, sess []pgtype.Text
	branch                           []pgtype.Text
}

func (r *eventRows) add(sessionID string, e *eventRow) {
	r.sessionID = append(r.sessionID, sessionID)
	r.seq = append(r.seq, e.seq)
	r.typ = append(r.typ, e.typ)
	r.at = append(r.at, e.at)
	r.key = append(r.key, e.key)
	r.messageID = append(r.messageID, e.messageID)
	r.delta = append(r.delta, e.delta)
	r.offset = append(r.offset, e.offset)
	r.coalescedFrom = append(r.coalescedFrom, e.coalescedFrom)
	r.message = append(r.message, e.payloads[0])
	r.run = append(r.run, e.payloads[1])
	r.question = append(r.question, e.payloads[2])
	r.tc = append(r.tc, e.payloads[3])
	r.sess = append(r.sess, e.payloads[4])
	r.branch = append(r.branch, e.payloads[5])
}

func (r *eventRows) args() []any {
	t := func(v []pgtype.Text) any { return pgtype.FlatArray[pgtype.Text](v) }
	return []any{r.sessionID, r.seq, r.typ, r.at, r.key, r.messageID, pgtype.FlatArray[[]byte](r.delta), r.offset,
		r.coalescedFrom, t(r.message), t(r.run), t(r.question), t(r.tc), t(r.sess), t(r.branch)}
}

// rewriteArgs are the arguments of qRewriteEvents for the folded events of a session.
func rewriteArgs(sessionID string, folded []*service.Event) []any {
	seqs, offsets, from := make([]int64, len(folded)), make([]int64, len(folded)), make([]int64, len(folded))
	deltas := make([][]byte, len(folded))
	for i, e := range folded {
		seqs[i], offsets[i], from[i], deltas[i] = e.Seq, int64(e.Offset), e.CoalescedFrom, dbText(e.Delta)
	}
	return []any{sessionID, seqs, pgtype.FlatArray[[]byte](deltas), offsets, from}
}

func scanEvent(row scanner) (*service.Event, error) {
	var e service.Event
	var at int64
	var payloads [6][]byte
	err := row.Scan(&e.SessionID, &e.Seq, &e.Type, &at, &e.Key, &e.MessageID, textCol{&e.Delta}, &e.Offset,
		&e.CoalescedFrom, &payloads[0], &payloads[1], &payloads[2], &payloads[3], &payloads[4], &payloads[5])
	if err != nil {
		return nil, err
	}
	e.At = goTime(at)
	for i, dst := range []any{&e.Message, &e.Run, &e.Question, &e.ToolCall, &e.Session, &e.Branch} {
		if payloads[i] != nil {
			if err := json.Unmarshal(payloads[i], dst); err != nil {
				return nil, err
			}
		}
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
	qIdempotency       = `SELECT ` + idemCols + ` FROM idempotency WHERE user_id = $1 AND idem_key = $2`
	qInsertIdempotency = `INSERT INTO idempotency (` + idemCols + `)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])`
)

// idempotencyRows are the columns of qInsertIdempotency.
type idempotencyRows struct {
	userID, key, sessionID, messageID, runID []string
	createdAt                                []int64
}

func (r *idempotencyRows) add(rec *service.IdempotencyRecord) {
	r.userID = append(r.userID, rec.UserID)
	r.key = append(r.key, rec.Key)
	r.sessionID = append(r.sessionID, rec.SessionID)
	r.messageID = append(r.messageID, rec.MessageID)
	r.runID = append(r.runID, rec.RunID)
	r.createdAt = append(r.createdAt, dbTime(rec.CreatedAt))
}

func (r *idempotencyRows) args() []any {
	return []any{r.userID, r.key, r.sessionID, r.messageID, r.runID, r.createdAt}
}

func scanIdempotency(row scanner) (*service.IdempotencyRecord, error) {
	var r service.IdempotencyRecord
	var created int64
	err := row.Scan(&r.UserID, &r.Key, &r.SessionID, &r.MessageID, &r.RunID, &created)
	r.CreatedAt = goTime(created)
	return &r, err
}

// Replicas (service.Coordinator).

const (
	qHeartbeat = `INSERT INTO replicas (id, beat_at, until) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at, until = excluded.until`
	qLive  = `SELECT id FROM replicas WHERE until > $1 ORDER BY id`
	qLeave = `DELETE FROM replicas WHERE id = $1`
	// qClaimRuns gives $1 the active runs whose owner is not alive at $2. SKIP LOCKED
	// leaves alone the runs another transaction holds (another replica claiming them, or
	// an Append writing them): two claims never both take a run, and none waits for the
	// other. Runs skipped this way are claimed next time, if still orphaned.
	qClaimRuns = `WITH orphans AS (
		SELECT id FROM runs
		WHERE status IN ` + activeStatuses + ` AND owner NOT IN (SELECT id FROM replicas WHERE until > $2)
		FOR UPDATE SKIP LOCKED)
		UPDATE runs SET owner = $1 FROM orphans WHERE runs.id = orphans.id
		RETURNING runs.id, runs.session_id, runs.user_id, runs.status, runs.error, runs.agent, runs.created_at,
			runs.started_at, runs.finished_at, runs.usage, runs.owner, runs.reply_to`
	qActiveRun = `SELECT ` + runCols + ` FROM runs WHERE session_id = $1 AND status IN ` + activeStatuses + `
		ORDER BY created_at, id LIMIT 1`
)

// The commands taken from the bus (service.ReplayGuard).

const (
	qFirstSeen  = `INSERT INTO bus_seen (id, until) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`
	qForgetSeen = `DELETE FROM bus_seen WHERE until < $1`
)

// Meta.

const (
	qMeta       = `SELECT value FROM meta WHERE name = $1`
	qInsertMeta = `INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`
	// qPing writes a row of its own connection; Ping rolls it back.
	qPing = `INSERT INTO meta (name, value) VALUES ('ping:' || pg_backend_pid(), '\x00'::bytea)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`
)

// Column types.

// scanner is a pgx.Row or pgx.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// Times are nanoseconds since the Unix epoch: exact, and ordered as the times are. The
// zero time is the smallest int64; other times must lie within int64 nanoseconds
// (timeFits), which Append checks before it writes.
const zeroTime = math.MinInt64

var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, math.MaxInt64)
)

// timeFits reports whether t can be stored.
func timeFits(t time.Time) bool {
	return t.IsZero() || (!t.Before(minTime) && !t.After(maxTime))
}

func dbTime(t time.Time) int64 {
	if t.IsZero() {
		return zeroTime
	}
	return t.UnixNano()
}

// dbBound is t as a bound for comparisons: times beyond what can be stored compare
// beyond every stored time.
func dbBound(t time.Time) int64 {
	switch {
	case t.IsZero():
		return zeroTime
	case t.Before(minTime):
		return math.MinInt64 + 1
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

func dbNullTime(t *time.Time) pgtype.Int8 {
	if t == nil {
		return pgtype.Int8{}
	}
	return pgtype.Int8{Int64: dbTime(*t), Valid: true}
}

func goTime(n int64) time.Time {
	if n == zeroTime {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func goNullTime(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := goTime(*n)
	return &t
}

// dbText is free text as stored (bytea): its bytes, never nil (nil is NULL).
func dbText(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return []byte(s)
}

func dbNullText(s *string) []byte {
	if s == nil {
		return nil
	}
	return dbText(*s)
}

// textCol scans a NOT NULL bytea column of free text.
type textCol struct{ s *string }

func (c textCol) ScanBytes(b []byte) error {
	*c.s = string(b)
	return nil
}

// nullTextCol scans a bytea column of free text that may be NULL.
type nullTextCol struct{ s **string }

func (c nullTextCol) ScanBytes(b []byte) error {
	if b == nil {
		*c.s = nil
		return nil
	}
	s := string(b)
	*c.s = &s
	return nil
}

// sqlLimit turns "0 or less means no limit" into LIMIT NULL.
func sqlLimit(n int) any {
	if n <= 0 {
		return nil
	}
	return int64(n)
}

func utcPtr(t *time.Time) {
	if t != nil {
		*t = t.UTC()
	}
}
