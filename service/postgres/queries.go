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

	"github.com/talkgraph/talkgraph/service"
)

// Transactions and locks.

const (
	// qBegin opens Append's and Compact's transactions. READ COMMITTED is spelled out
	// because Append relies on it, whatever the server's default: each statement sees
	// what was committed before it began, so that the state read after the session rows
	// are locked is current.
	qBegin = `BEGIN ISOLATION LEVEL READ COMMITTED`
	// qPlanSettings opens Append's and the folding's statements with two settings, LOCAL
	// (they end with the transaction):
	//   - plan_cache_mode: each statement uses its generic plan from its first call on a
	//     connection. Left to choose, PostgreSQL plans most of them anew at every call: the
	//     length of each array argument makes a custom plan look cheaper than the generic
	//     one. Their plans do not depend on the arguments (each row is found by its key),
	//     so planning them again is pure cost.
	//   - random_page_cost: what these statements read (the rows of sessions being
	//     written, the end of their logs, the indexes' upper pages) is in the server's
	//     cache, where a probe by key costs about what a page read in order does. At the
	//     default cost (4, a disk's seek), a table of a few thousand rows, or one without
	//     statistics yet (a new database, or autovacuum not run since it grew), looks
	//     cheaper to read whole than to probe a few dozen times: the sessions' update and
	//     the folding's deletion each read their whole table at every call.
	qPlanSettings = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
		set_config('random_page_cost', '1.1', true)`
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
	// qLockSessions takes the write lock of each session key (sessionLockKey), in the order
	// given (sorted: two replicas never deadlock). Every write of a session's log or rows
	// takes it (Append, compact); an advisory lock, it writes nothing to the session's row,
	// where a row lock would write to its page and the WAL on every round. Two sessions of
	// one key only wait for each other.
	qLockSessions = `SELECT pg_advisory_xact_lock(1950810115, k) FROM unnest($1::int[]) AS k`
	// qSessionExists tells whether a session is stored (compact, after its lock).
	qSessionExists = `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)`
)

// Append's reads, after the locks.

const (
	// qSessionStates returns each existing session of the call with its epoch and the Seq
	// of its last event: the one the store knows when the epoch is the one it left ($2,
	// $3, $4: whether it knows one, the epoch, the Seq), otherwise read from the log (one
	// backward probe of the events' primary key; see tails.go); and whether it was known.
	// (Each session is looked up by its primary key, a LATERAL that the planner cannot
	// make a join of: a join was planned as a scan of the whole table.)
	qSessionStates = `SELECT s.id, s.epoch, CASE WHEN v.known AND s.epoch = v.epoch THEN v.last
			ELSE coalesce((SELECT max(e.seq) FROM events e WHERE e.session_id = s.id), 0) END,
			v.known AND s.epoch = v.epoch
		FROM unnest($1::text[], $2::bool[], $3::bigint[], $4::bigint[]) AS v (id, known, epoch, last)
		CROSS JOIN LATERAL (SELECT id, epoch FROM sessions WHERE sessions.id = v.id LIMIT 1) s`
	// qSetEpochs gives sessions the epochs of the transaction that wrote them without
	// having found its own.
	qSetEpochs = `UPDATE sessions s SET epoch = v.epoch FROM unnest($1::text[], $2::bigint[]) AS v (id, epoch) WHERE s.id = v.id`
	// qUsedKeys returns the idempotency keys of the call that are taken, each looked up by
	// the table's primary key (a LATERAL with a LIMIT: a join was planned as a scan of the
	// whole table, which grows with every message).
	qUsedKeys = `SELECT v.user_id, v.idem_key FROM unnest($1::text[], $2::text[]) AS v (user_id, idem_key)
		CROSS JOIN LATERAL (SELECT 1 FROM idempotency i WHERE i.user_id = v.user_id AND i.idem_key = v.idem_key LIMIT 1) t`
	// qRunningRuns returns the RUNNING runs of the users that admit runs, each user's
	// found through runs_by_user. (OFFSET 0 keeps the LATERAL a lookup per user: written
	// as one condition, user_id = ANY($1), it was planned as a walk through every RUNNING
	// run of every user by runs_by_status, whenever the statistics said few were running.)
	qRunningRuns = `SELECT r.user_id, r.id, r.session_id FROM unnest($1::text[]) AS v (user_id)
		CROSS JOIN LATERAL (SELECT user_id, id, session_id FROM runs
			WHERE runs.user_id = v.user_id AND runs.status = 'RUNNING' OFFSET 0) r`
	// qForeignRows returns the rows of the call that exist already, (table, ID, the
	// session they belong to), for Append to find those of another session than the batch
	// that writes them. Each is looked up by its table's primary key, in a LATERAL with a
	// LIMIT, which the planner cannot make a join of (a join of the IDs with the table was
	// planned as a scan of the whole table).
	qForeignRows = `SELECT 'message', t.* FROM unnest($1::text[]) AS v (id)
			CROSS JOIN LATERAL (SELECT id, session_id FROM messages WHERE messages.id = v.id LIMIT 1) t
		UNION ALL SELECT 'run', t.* FROM unnest($2::text[]) AS v (id)
			CROSS JOIN LATERAL (SELECT id, session_id FROM runs WHERE runs.id = v.id LIMIT 1) t
		UNION ALL SELECT 'question', t.* FROM unnest($3::text[]) AS v (id)
			CROSS JOIN LATERAL (SELECT id, session_id FROM questions WHERE questions.id = v.id LIMIT 1) t
		UNION ALL SELECT 'tool call', t.* FROM unnest($4::text[]) AS v (id)
			CROSS JOIN LATERAL (SELECT id, session_id FROM tool_calls WHERE tool_calls.id = v.id LIMIT 1) t`
)

// Sessions.

const sessionCols = `id, user_id, title, settings, created_at, updated_at, unread`

// lastSeqOf is the Seq of a session's last event, 0 before any.
const lastSeqOf = `coalesce((SELECT max(seq) FROM events WHERE events.session_id = sessions.id), 0)`

const (
	qSession     = `SELECT ` + sessionCols + `, ` + lastSeqOf + ` FROM sessions WHERE id = $1`
	qSessions    = `SELECT ` + sessionCols + `, ` + lastSeqOf + ` FROM sessions WHERE user_id = $1 ORDER BY updated_at DESC, id DESC LIMIT $2`
	qSessionsAft = `SELECT ` + sessionCols + `, ` + lastSeqOf + ` FROM sessions WHERE user_id = $1 AND (updated_at, id) < ($2, $3)
		ORDER BY updated_at DESC, id DESC LIMIT $4`
	qInsertSessions = `INSERT INTO sessions (` + sessionCols + `, bytes, epoch)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::bigint[], $6::bigint[], $7::bool[], $8::bigint[],
			$9::bigint[])`
	// qFootprint counts a user's sessions and their weight.
	qFootprint = `SELECT count(*), coalesce(sum(bytes), 0)::bigint FROM sessions WHERE user_id = $1`
	// qChangeSessions writes what a round changes of each session's row, as one update
	// (one row version) per session: a SessionUpdated snapshot (title, settings, time) or
	// else an activity time that only moves forward (zeroTime: none), the weight added
	// against the user's quota, and the unread flag where Changes.Unread sets it. Columns
	// it leaves as they were keep the update HOT when no indexed one changes.
	qChangeSessions = `UPDATE sessions s SET
			title = CASE WHEN v.snap THEN v.title ELSE s.title END,
			settings = CASE WHEN v.snap THEN v.settings ELSE s.settings END,
			updated_at = CASE WHEN v.snap THEN v.at ELSE greatest(s.updated_at, v.at) END,
			bytes = s.bytes + v.bytes,
			unread = CASE WHEN v.set_unread THEN v.unread ELSE s.unread END
		FROM unnest($1::text[], $2::bool[], $3::bytea[], $4::text[], $5::bigint[], $6::bigint[], $7::bool[], $8::bool[])
			AS v (id, snap, title, settings, at, bytes, set_unread, unread)
		WHERE s.id = v.id`
	// qDeleteSessions deletes sessions and, by ON DELETE CASCADE, their rows; their events,
	// which no foreign key ties to them, go by qDeleteEvents in the same write.
	qDeleteSessions = `DELETE FROM sessions WHERE id = ANY($1::text[])`
	qDeleteEvents   = `DELETE FROM events WHERE session_id = ANY($1::text[])`
)

func scanSession(row scanner) (*service.TalkSession, error) {
	var s service.TalkSession
	var settings []byte
	var created, updated int64
	err := row.Scan(&s.ID, &s.UserID, textCol{&s.Title}, &settings, &created, &updated, &s.Unread, &s.LastSeq)
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
	reply_to, budget`

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
			$8::bigint[], $9::bigint[], $10::text[], $11::text[], $13::text[], $14::text[])
		ON CONFLICT (id) DO UPDATE SET user_id = excluded.user_id, status = excluded.status, error = excluded.error,
			agent = excluded.agent, created_at = excluded.created_at, started_at = excluded.started_at,
			finished_at = excluded.finished_at, usage = excluded.usage, owner = excluded.owner,
			reply_to = excluded.reply_to, budget = excluded.budget
		WHERE t.session_id = excluded.session_id
		RETURNING 1)
		SELECT talkgraph_all_written((SELECT count(*) FROM w), $12)`
)

func scanRun(row scanner) (*service.Run, error) {
	var r service.Run
	var created int64
	var started, finished *int64
	var usage []byte
	err := row.Scan(&r.ID, &r.SessionID, &r.UserID, &r.Status, textCol{&r.Error}, &r.Agent, &created, &started,
		&finished, &usage, &r.Owner, &r.ReplyTo, &r.Budget)
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
	// qFoldWhole writes prepared foldings (see foldPrepared): for each run ($1 the index of
	// its compaction, its session, first and last Seq, text and offset), where the log holds
	// every Seq of the run, its events but the last are dropped and the last rewritten; it
	// returns the indexes of the runs not whole. The writes of a statement's WITH clauses
	// are all made, and none of its reads sees them.
	qFoldWhole = `WITH v AS (
			SELECT * FROM unnest($1::int[], $2::text[], $3::bigint[], $4::bigint[], $5::bytea[], $6::bigint[])
				AS v (i, session_id, first, last, delta, delta_offset)),
		w AS (
			SELECT v.*, (SELECT count(*) FROM events e
				WHERE e.session_id = v.session_id AND e.seq >= v.first AND e.seq <= v.last) = v.last - v.first + 1 AS whole
			FROM v),
		d AS (
			DELETE FROM events e USING w
			WHERE w.whole AND e.session_id = w.session_id AND e.seq >= w.first AND e.seq < w.last),
		u AS (
			UPDATE events e SET delta = w.delta, delta_offset = w.delta_offset, coalesced_from = w.first
			FROM w WHERE w.whole AND e.session_id = w.session_id AND e.seq = w.last)
		SELECT i FROM w WHERE NOT whole`
)

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
			runs.started_at, runs.finished_at, runs.usage, runs.owner, runs.reply_to, runs.budget`
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
