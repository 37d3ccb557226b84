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

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/talkgraph/talkgraph/service"
)

// sessionRows are the columns of qInsertSessions.
type sessionRows struct {
	id, userID         []string
	title              [][]byte
	settings           []string
	createdAt, updated []int64
	unread             []bool
	bytes              []int64 // the creation's Size and what its events add
	epoch              []int64
}

func (r *sessionRows) add(s *service.TalkSession, settings string, bytes, epoch int64) {
	r.bytes, r.epoch = append(r.bytes, bytes), append(r.epoch, epoch)
	r.id = append(r.id, s.ID)
	r.userID = append(r.userID, s.UserID)
	r.title = append(r.title, dbText(s.Title))
	r.settings = append(r.settings, settings)
	r.createdAt = append(r.createdAt, dbTime(s.CreatedAt))
	r.updated = append(r.updated, dbTime(s.UpdatedAt))
	r.unread = append(r.unread, s.Unread)
}

func (r *sessionRows) args() []any {
	return []any{r.id, r.userID, pgtype.FlatArray[[]byte](r.title), r.settings, r.createdAt, r.updated, r.unread, r.bytes, r.epoch}
}

// sessionChanges are the columns of qChangeSessions, a row per session a round changes.
type sessionChanges struct {
	id                      []string
	snap, setUnread, unread []bool
	title                   [][]byte
	settings                []string
	at, bytes               []int64
}

// add takes what batch p changes of its session's row, if anything; grow is the weight it
// adds (0 for a session it creates, whose row is inserted with it).
func (r *sessionChanges) add(p *prep, grow int64) {
	ch := &p.ch
	snap, touch := ch.SessionRow()
	if snap == nil && touch.IsZero() && grow == 0 && ch.Unread == nil {
		return
	}
	r.id = append(r.id, p.b.SessionID)
	r.snap = append(r.snap, snap != nil)
	r.bytes = append(r.bytes, grow)
	r.setUnread = append(r.setUnread, ch.Unread != nil)
	r.unread = append(r.unread, ch.Unread != nil && *ch.Unread)
	if snap != nil {
		r.title, r.settings = append(r.title, dbText(snap.Title)), append(r.settings, p.update)
		r.at = append(r.at, dbTime(snap.UpdatedAt))
		return
	}
	// No activity is zeroTime, before any: greatest keeps the row's time.
	r.title, r.settings, r.at = append(r.title, nil), append(r.settings, ""), append(r.at, dbTime(touch))
}

func (r *sessionChanges) args() []any {
	return []any{r.id, r.snap, pgtype.FlatArray[[]byte](r.title), r.settings, r.at, r.bytes, r.setUnread, r.unread}
}

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
	budget                        []string
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
	rs.budget = append(rs.budget, string(r.Budget))
}

func (rs *runRows) args() []any {
	return []any{rs.id, rs.sessionID, rs.userID, rs.status, pgtype.FlatArray[[]byte](rs.errText), rs.agent, rs.createdAt,
		pgtype.FlatArray[pgtype.Int8](rs.startedAt), pgtype.FlatArray[pgtype.Int8](rs.finishedAt),
		pgtype.FlatArray[pgtype.Text](rs.usage), rs.owner, int64(len(rs.id)), rs.replyTo, rs.budget}
}

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
